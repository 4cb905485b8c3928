"""The engine: one step of a run, exactly as the design says.

For each call from agent code the run context:

1. validates and hashes the inputs (nothing runs or is written for inputs that are not JSON);
2. replays a ``succeeded`` row whose hash matches, raises ``StaleCheckpoint`` when it does not;
3. sends a ``started`` effect to its tool's reconcile(effect_key): a result is committed as
   ``succeeded``, ``NOT_HAPPENED`` executes again with the same key, ``None`` raises
   ``NeedsReconciliation``;
4. otherwise executes: an effect commits ``started`` with its effect key, calls the tool with
   that key as its idempotency key, then commits ``succeeded`` (two commits, no I/O inside a
   transaction); a read, model call or clock read commits once, after.

The previous step's ``next_step_id`` is written in the same statement as the next step's first
write; on replay a call whose step id differs from the recorded next is a divergence, handled by
the agent's policy. Every write is fenced by the run's lease token.
"""

from __future__ import annotations

import logging
import random as random_module
import uuid as uuid_module
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings

from ledger import canonical, llm, store
from ledger.errors import (
    Divergence,
    DuplicateStepId,
    LedgerError,
    NeedsReconciliation,
    NotJSON,
    StaleCheckpoint,
    StepFailed,
)
from ledger.registry import NOT_HAPPENED, Agent, Tool
from ledger.store import StepRow, StepWrite

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


@dataclass
class _Call:
    """Everything about one step call that does not depend on the ledger."""

    step_id: str
    kind: str
    tool: str
    inputs: Any
    inputs_text: str
    input_hash: str
    execute: Callable[[str | None], Any]
    reconcile: Callable[[str], Any] | None = None
    retries: int = 0
    ttl_seconds: float | None = None
    model_id: str = ""
    prompt_hash: str = ""


class RunContext:
    """What an agent function receives: every call through it becomes a ledger row."""

    def __init__(
        self,
        *,
        run_id: str,
        token: str,
        agent: Agent,
        inputs: Any,
        ledger: dict[str, StepRow],
        clock: Clock,
    ) -> None:
        self.run_id = run_id
        self.inputs = inputs
        self.agent = agent
        self._token = token
        self._ledger = ledger
        self._clock = clock
        self._counter = 0
        self._scope: list[str] = []
        self._used: set[str] = set()
        self._prev: str | None = None
        self._next_seq = max((row.seq for row in ledger.values()), default=0) + 1
        self.replayed = 0
        self.executed = 0

    # --- the agent author's calls ---------------------------------------------------------

    def call(self, tool: Tool, /, *, step: str | None = None, **inputs: Any) -> Any:
        """Call a registered tool through the ledger; returns its (recorded) result."""
        if not isinstance(tool, Tool):
            raise TypeError(f"ctx.call() takes a registered @tool, not {tool!r}")
        step_id = self._step_id(step, tool.name)
        if tool.kind == "pure":
            return tool.fn(**inputs)

        def execute(key: str | None) -> Any:
            if tool.kind == "effect":
                return tool.fn(**inputs, idempotency_key=key)
            return tool.fn(**inputs)

        return self._step(
            self._prepare(
                step_id,
                kind=tool.kind,
                tool=tool.name,
                inputs=inputs,
                execute=execute,
                reconcile=tool.reconcile,
                retries=tool.retries,
                ttl_seconds=tool.ttl_seconds,
            )
        )

    def model(
        self,
        prompt: str,
        *,
        model: str,
        system: str = "",
        tools: list[Tool] | tuple[Tool, ...] | None = None,
        step: str | None = None,
        retries: int = 2,
    ) -> Any:
        """A model call: inputs hashed, output stored, never re-derived on replay."""
        step_id = self._step_id(step, "model")
        schema = [t.schema() for t in (tools if tools is not None else self.agent.tools)]
        schema_hash = canonical.hash_text(canonical.dumps(canonical.normalize(schema)))
        inputs = {"model": model, "system": system, "prompt": prompt, "tool_schema": schema_hash}

        def execute(_key: str | None) -> Any:
            return llm.client_for(model).complete(
                model=model, prompt=prompt, system=system, tools=schema
            )

        return self._step(
            self._prepare(
                step_id,
                kind="model",
                tool="model",
                inputs=inputs,
                execute=execute,
                retries=retries,
                model_id=model,
                prompt_hash=canonical.hash_text(canonical.dumps([system, prompt])),
            )
        )

    def now(self, *, step: str | None = None) -> datetime:
        """The wall clock, recorded: a replay returns the first reading."""
        step_id = self._step_id(step, "now")
        value = self._step(
            self._prepare(
                step_id,
                kind="clock",
                tool="now",
                inputs={},
                execute=lambda _k: self._clock().isoformat(),
            )
        )
        return datetime.fromisoformat(value)

    def uuid(self, *, step: str | None = None) -> str:
        step_id = self._step_id(step, "uuid")
        return str(
            self._step(
                self._prepare(
                    step_id,
                    kind="clock",
                    tool="uuid",
                    inputs={},
                    execute=lambda _k: str(uuid_module.uuid4()),
                )
            )
        )

    def random(self, *, step: str | None = None) -> float:
        step_id = self._step_id(step, "random")
        return float(
            self._step(
                self._prepare(
                    step_id,
                    kind="clock",
                    tool="random",
                    inputs={},
                    execute=lambda _k: random_module.SystemRandom().random(),
                )
            )
        )

    @contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Prefix the step ids of the calls inside: ``with ctx.scope("plan.3"): ...``."""
        self._scope.append(name)
        try:
            yield
        finally:
            self._scope.pop()

    # --- the engine -----------------------------------------------------------------------

    def _step_id(self, step: str | None, name: str) -> str:
        self._counter += 1
        local = step if step is not None else f"{self._counter}.{name}"
        if not local or len(local) > 200:
            raise DuplicateStepId(f"step id {local!r} must be 1 to 200 characters")
        return ".".join([*self._scope, local])

    def _prepare(self, step_id: str, *, inputs: Any, **fields: Any) -> _Call:
        data, text = canonical.canonical(inputs, step_id=step_id)
        if step_id in self._used:
            raise DuplicateStepId(
                f"step id {step_id!r} is used twice in run {self.run_id}; "
                "step ids must be unique within a run"
            )
        self._used.add(step_id)
        return _Call(
            step_id=step_id,
            inputs=data,
            inputs_text=text,
            input_hash=canonical.hash_text(text),
            **fields,
        )

    def _step(self, call: _Call) -> Any:
        row = self._ledger.get(call.step_id)
        if row is not None and row.status == "abandoned":
            row = None
        abandon = self._check_path(call.step_id)
        prev = self._prev
        if row is not None and row.status == "succeeded":
            if row.input_hash != call.input_hash:
                raise StaleCheckpoint(
                    call.step_id,
                    f"stored input hash {row.input_hash[:12]}… differs from today's "
                    f"{call.input_hash[:12]}…; the stored result answers another question",
                )
            if not self._expired(row):
                self._prev = call.step_id
                self.replayed += 1
                return row.result
        if row is not None and row.status == "started" and call.kind == "effect":
            settled = self._reconcile(call, row)
            if settled is not NOT_HAPPENED:
                self._prev = call.step_id
                return settled
        elif self._failed_effect_happened(call, row):
            assert row is not None
            self._prev = call.step_id
            return row.result
        result = self._execute(call, row, prev=prev, abandon=abandon)
        self._prev = call.step_id
        self.executed += 1
        return result

    def _expired(self, row: StepRow) -> bool:
        return row.kind == "read" and row.expires_at is not None and row.expires_at <= self._clock()

    def _check_path(self, step_id: str) -> list[str]:
        """Compare the call with the recorded path; return the rows a replan abandons."""
        if self._prev is None:
            live = [r for r in self._ledger.values() if r.status != "abandoned"]
            expected = min(live, key=lambda r: r.seq).step_id if live else None
        else:
            prev_row = self._ledger.get(self._prev)
            expected = prev_row.next_step_id if prev_row is not None else None
        if expected is None or expected == step_id:
            return []
        where = f"after {self._prev!r}" if self._prev else "as the first step"
        detail = f"the recorded run went {where} to {expected!r}; today's code calls {step_id!r}"
        if self.agent.divergence == "refuse":
            raise Divergence(step_id, detail)
        log.warning("run %s: replanning: %s", self.run_id, detail)
        return self._abandon_branch(expected)

    def _abandon_branch(self, start: str) -> list[str]:
        """The non-effect rows of the diverged branch; effect rows keep their keys."""
        abandoned: list[str] = []
        seen: set[str] = set()
        current: str | None = start
        while current is not None and current not in seen:
            seen.add(current)
            row = self._ledger.get(current)
            if row is None:
                break
            if row.kind != "effect" and row.status != "abandoned":
                abandoned.append(current)
                row.status = "abandoned"
            current = row.next_step_id
        return abandoned

    def _failed_effect_happened(self, call: _Call, row: StepRow | None) -> bool:
        """A failed effect is asked about before it is sent again: its last attempt may have
        reached the downstream system before the error (a timeout after the charge)."""
        if row is None or row.status != "failed" or call.kind != "effect" or not call.reconcile:
            return False
        if row.input_hash != call.input_hash or not row.effect_key:
            return False
        answer = call.reconcile(row.effect_key)
        if answer is None or answer is NOT_HAPPENED:
            return False  # send again under the same key, as the tool's retry policy allows
        try:
            data, text = canonical.canonical(answer, step_id=call.step_id)
        except NotJSON:
            return False
        store.update_step(
            run_id=self.run_id,
            token=self._token,
            pk=row.pk,
            status="succeeded",
            now=self._clock(),
            result_json=text,
            errors_json=canonical.dumps(row.errors),
        )
        row.status, row.result = "succeeded", data
        return True

    def _reconcile(self, call: _Call, row: StepRow) -> Any:
        """A started effect: ask the downstream system through the effect key."""
        assert row.effect_key is not None
        if row.input_hash != call.input_hash:
            raise StaleCheckpoint(
                call.step_id,
                "this effect was started with other inputs; settle it before the run goes on",
            )
        if call.reconcile is None:
            raise NeedsReconciliation(
                call.step_id,
                f"effect {call.tool!r} was started under key {row.effect_key} and the crash "
                "left its outcome unknown; the tool has no read path to ask",
            )
        answer = call.reconcile(row.effect_key)
        if answer is None:
            raise NeedsReconciliation(
                call.step_id,
                f"{call.tool!r} could not say whether key {row.effect_key} took effect",
            )
        if answer is NOT_HAPPENED:
            log.info("run %s: %s did not happen; executing with the same key", self.run_id, row)
            return NOT_HAPPENED
        try:
            data, text = canonical.canonical(answer, step_id=call.step_id)
        except NotJSON as exc:
            raise NeedsReconciliation(call.step_id, f"reconcile answered non-JSON: {exc}") from exc
        store.update_step(
            run_id=self.run_id,
            token=self._token,
            pk=row.pk,
            status="succeeded",
            now=self._clock(),
            result_json=text,
            errors_json=canonical.dumps(row.errors),
        )
        row.status, row.result = "succeeded", data
        return data

    def _execute(
        self, call: _Call, row: StepRow | None, *, prev: str | None, abandon: list[str]
    ) -> Any:
        attempt = row.attempt + 1 if row is not None else 1
        seq = row.seq if row is not None else self._take_seq()
        errors = list(row.errors) if row is not None else []
        key = None
        if call.kind == "effect":
            key = row.effect_key if row is not None and row.effect_key else self._effect_key(call)
        first_write = True
        while True:
            write = self._write(call, seq=seq, attempt=attempt, key=key, errors=errors)
            if first_write:
                write.prev_step_id, write.abandon = prev, abandon
            if call.kind == "effect":
                write.status = "started"
                pk = store.write_step(write)
                first_write = False
            try:
                outcome = call.execute(key)
                data, text = canonical.canonical(outcome, step_id=call.step_id)
            except NotJSON as exc:
                if call.kind == "effect":
                    raise NeedsReconciliation(
                        call.step_id,
                        f"the effect ran but returned a result that is not JSON: {exc}",
                    ) from exc
                error = str(exc)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            else:
                self._commit_success(call, write, pk if call.kind == "effect" else None, data, text)
                self._remember(call, write, data, key)
                return data
            errors.append(
                {"attempt": attempt, "error": error[:2000], "at": self._clock().isoformat()}
            )
            self._commit_failure(call, write, pk if call.kind == "effect" else None, error, errors)
            first_write = False
            if attempt > call.retries + (row.attempt if row is not None else 0):
                self._remember(call, write, None, key, status="failed")
                raise StepFailed(call.step_id, attempt, error)
            attempt += 1

    def _write(
        self, call: _Call, *, seq: int, attempt: int, key: str | None, errors: list[Any]
    ) -> StepWrite:
        stored, truncated = _stored_inputs(call.inputs_text)
        return StepWrite(
            run_id=self.run_id,
            token=self._token,
            step_id=call.step_id,
            status="succeeded",
            kind=call.kind,
            tool=call.tool,
            seq=seq,
            input_hash=call.input_hash,
            inputs_json=stored,
            inputs_truncated=truncated,
            attempt=attempt,
            now=self._clock(),
            effect_key=key,
            errors_json=canonical.dumps(errors),
            model_id=call.model_id,
            prompt_hash=call.prompt_hash,
        )

    def _commit_success(
        self, call: _Call, write: StepWrite, pk: int | None, data: Any, text: str
    ) -> None:
        now = self._clock()
        expires = now + timedelta(seconds=call.ttl_seconds) if call.ttl_seconds else None
        if pk is not None:
            store.update_step(
                run_id=self.run_id,
                token=self._token,
                pk=pk,
                status="succeeded",
                now=now,
                result_json=text,
                errors_json=write.errors_json,
                expires_at=expires,
            )
            return
        write.status, write.result_json, write.finished = "succeeded", text, True
        write.now, write.expires_at = now, expires
        store.write_step(write)

    def _commit_failure(
        self, call: _Call, write: StepWrite, pk: int | None, error: str, errors: list[Any]
    ) -> None:
        errors_json = canonical.dumps(errors)
        if pk is not None:
            store.update_step(
                run_id=self.run_id,
                token=self._token,
                pk=pk,
                status="failed",
                now=self._clock(),
                error=error,
                errors_json=errors_json,
            )
            return
        write.status, write.error, write.errors_json, write.finished = (
            "failed",
            error,
            errors_json,
            True,
        )
        store.write_step(write)
        write.prev_step_id, write.abandon = None, ()

    def _remember(
        self, call: _Call, write: StepWrite, data: Any, key: str | None, status: str = "succeeded"
    ) -> None:
        """Keep the in-memory ledger equal to the table after a write."""
        if self._prev is not None and self._prev in self._ledger:
            self._ledger[self._prev].next_step_id = call.step_id
        existing = self._ledger.get(call.step_id)
        self._ledger[call.step_id] = StepRow(
            pk=existing.pk if existing else 0,
            step_id=call.step_id,
            input_hash=call.input_hash,
            status=status,
            result=data,
            next_step_id=existing.next_step_id if existing else None,
            attempt=write.attempt,
            effect_key=key,
            kind=call.kind,
            tool=call.tool,
            seq=write.seq,
            errors=_loads(write.errors_json),
        )

    def _take_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _effect_key(self, call: _Call) -> str:
        # Unique per run and step, readable, and stable once written: it is stored with the
        # intent before the tool sees it, and every later attempt reuses the stored key.
        return f"{self.run_id}:{call.step_id}"


def _stored_inputs(text: str) -> tuple[str | None, bool]:
    limit = settings.RUNLEDGER_MAX_STORED_INPUT_BYTES
    if len(text.encode("utf-8")) <= limit:
        return text, False
    preview = text.encode("utf-8")[: max(limit - 200, 0)].decode("utf-8", "ignore")
    return canonical.dumps(
        {"truncated": True, "bytes": len(text.encode()), "preview": preview}
    ), True


def _loads(text: str) -> Any:
    import json

    return json.loads(text)


__all__ = ["Clock", "LedgerError", "RunContext"]
