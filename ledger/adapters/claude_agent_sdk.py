"""A Claude Agent SDK session run durably inside a runledger agent (extra: claude-agent-sdk).

    from claude_agent_sdk import ClaudeAgentOptions
    from ledger.adapters.claude_agent_sdk import run_session

    @agent("claude_refund", plan_version="1", tools=[fetch_invoice, refund_charge, notify_team])
    def claude_refund(ctx, inputs):
        return run_session(ctx, inputs["prompt"], tools=[fetch_invoice, refund_charge, notify_team],
                           options=ClaudeAgentOptions(model="claude-sonnet-4-5"))

What it does with the SDK's own extension points:

- **Transcript** (``SessionStore``): ``LedgerSessionStore`` keeps every transcript line the CLI
  writes in the ledger's database (``ClaudeSessionEntry``), bound to the run. The session id is
  derived from the run id, so a resume on any machine (another process, another
  ``CLAUDE_CONFIG_DIR``) resumes the same session from the database, never from local disk.
- **Tools**: the author's ``@tool`` functions are served to the CLI as in-process SDK MCP tools
  (``mcp__runledger__<name>``). A ``PreToolUse`` hook gives each call its step id
  (``claude.<n>.<tool>``: the n-th tool call of the session, in the order the model asked) and
  refuses arguments that are not JSON; the tool's handler passes the call through the ledger
  (``ctx.call``: a read executes then commits; an effect commits its intent, is sent with the
  effect key as its idempotency key, then commits its result). On a resumed session a call the
  ledger already holds is answered from the ledger (never sent again); a started effect is
  reconciled through its lookup, or, without one, the ``PostToolUse`` hook stops the session and
  the run waits for a person (``needs_attention``/reconciliation).
- **Fork**: a run forked from another (``run_fork``) starts from a fork of the parent's session
  (``fork_session_via_store``), cut after the tool result of the step it was forked at.

Model requests are made by the CLI itself and are not ledger steps: on a resume the CLI asks the
model again for the turns after the stored transcript (see docs/authors/claude-agent-sdk.md).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import queue
import tempfile
import threading
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from ledger import canonical
from ledger.adapters import register_transcript
from ledger.errors import AgentDefinitionError, NotJSON
from ledger.registry import Tool
from ledger.states import StepKind

if TYPE_CHECKING:
    from ledger.engine import RunContext

try:
    import claude_agent_sdk as sdk
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        "ledger.adapters.claude_agent_sdk needs the Claude Agent SDK: "
        "pip install 'runledger[claude-agent-sdk]'"
    ) from exc

#: The SDK versions this adapter is written and tested against (the extra pins the same).
SUPPORTED = ((0, 2, 184), (0, 3, 0))
SERVER = "runledger"
#: The prompt a resumed session is continued with (the stored transcript holds the first one).
RESUME_PROMPT = "Continue from where the conversation stopped; do not repeat finished tool calls."
#: How long a tool call waits for the SDK to mirror the model's request for it to the store.
MIRROR_WAIT = 10.0
log = logging.getLogger(__name__)
_NAMESPACE = uuid.UUID("7b1f3c0e-9a51-4d4e-8c1a-52f0c1a3d001")


def check_version(version: str | None = None) -> None:
    """Refuse an SDK outside the pinned range, saying which version and what to install."""
    text = version if version is not None else sdk.__version__
    try:
        found = tuple(int(part) for part in text.split(".")[:3])
    except ValueError:
        found = ()
    low, high = SUPPORTED
    if not found or not (low <= found < high):
        raise AgentDefinitionError(
            f"claude-agent-sdk {text} is outside the range runledger's adapter supports "
            f"(>={'.'.join(map(str, low))},<{'.'.join(map(str, high))}); "
            "install it with: pip install 'runledger[claude-agent-sdk]'"
        )


check_version()


def session_id_for(run_id: str) -> str:
    """The Claude session id of a run: the same on every machine that executes the run."""
    return str(uuid.uuid5(_NAMESPACE, run_id))


# --- the transcript: a SessionStore in the ledger's database ---------------------------------


def _key(key: Any) -> tuple[str, str, str]:
    return key["project_key"], key["session_id"], key.get("subpath") or ""


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


class LedgerSessionStore:
    """The SDK's ``SessionStore`` on the ledger's database (table ``ClaudeSessionEntry``).
    (Duck-typed, as the SDK allows: the optional methods it does not implement are absent.)

    ``run_id`` binds what this store appends to that run (its transcript on the run page).
    Implements ``append``, ``load``, ``list_sessions``, ``delete`` and ``list_subkeys``; the
    summaries sidecar (``list_session_summaries``) is left to the SDK's fallback.
    Each method runs its ORM work in a thread (``asyncio.to_thread``) and closes that thread's
    connection, so the SDK's event loop never blocks on the database.
    """

    def __init__(self, run_id: str | None = None) -> None:
        self.run_id = run_id

    # The sync halves (also used by the adapter outside the event loop).

    def append_sync(self, key: Any, entries: list[Any]) -> None:
        from ledger.models import ClaudeSessionEntry

        if not entries:
            return
        project, session, subpath = _key(key)
        now = datetime.now(UTC)
        rows = []
        for entry in entries:
            if not isinstance(entry, dict):
                raise TypeError(f"a transcript entry must be a JSON object, not {entry!r:.80}")
            ident = entry.get("uuid")
            rows.append(
                ClaudeSessionEntry(
                    run_id=self.run_id,
                    project_key=project,
                    session_id=session,
                    subpath=subpath,
                    uuid=ident if isinstance(ident, str) else "",
                    entry=canonical.normalize(entry, step_id="<transcript entry>"),
                    created_at=now,
                )
            )
        ClaudeSessionEntry.objects.bulk_create(rows, ignore_conflicts=True)

    def load_sync(self, key: Any) -> list[Any] | None:
        from ledger.models import ClaudeSessionEntry

        project, session, subpath = _key(key)
        rows = list(
            ClaudeSessionEntry.objects.filter(
                project_key=project, session_id=session, subpath=subpath
            )
            .order_by("id")
            .values_list("entry", flat=True)
        )
        return rows or None

    def holds_tool_use(self, session_id: str, tool_use_id: str) -> bool:
        """Whether this run's stored transcript of ``session_id`` holds the tool call."""
        from ledger.models import ClaudeSessionEntry

        recent = (
            ClaudeSessionEntry.objects.filter(session_id=session_id, subpath="")
            .order_by("-id")
            .values_list("entry", flat=True)[:50]
        )
        return any(
            block.get("type") == "tool_use" and block.get("id") == tool_use_id
            for _entry, block in _blocks(list(recent))
        )

    def _list_sessions(self, project_key: str) -> list[Any]:
        from django.db.models import Max

        from ledger.models import ClaudeSessionEntry

        rows = (
            ClaudeSessionEntry.objects.filter(project_key=project_key, subpath="")
            .values("session_id")
            .annotate(mtime=Max("created_at"))
        )
        return [{"session_id": r["session_id"], "mtime": _ms(r["mtime"])} for r in rows]

    def _delete(self, key: Any) -> None:
        from ledger.models import ClaudeSessionEntry

        project, session, subpath = _key(key)
        rows = ClaudeSessionEntry.objects.filter(project_key=project, session_id=session)
        if key.get("subpath"):
            rows = rows.filter(subpath=subpath)
        rows.delete()

    def _list_subkeys(self, key: Any) -> list[str]:
        from ledger.models import ClaudeSessionEntry

        rows = (
            ClaudeSessionEntry.objects.filter(
                project_key=key["project_key"], session_id=key["session_id"]
            )
            .exclude(subpath="")
            .values_list("subpath", flat=True)
            .distinct()
        )
        return sorted(rows)

    # The SDK's async interface.

    async def append(self, key: Any, entries: list[Any]) -> None:
        await _in_thread(self.append_sync, key, entries)

    async def load(self, key: Any) -> list[Any] | None:
        result: list[Any] | None = await _in_thread(self.load_sync, key)
        return result

    async def list_sessions(self, project_key: str) -> list[Any]:
        result: list[Any] = await _in_thread(self._list_sessions, project_key)
        return result

    async def delete(self, key: Any) -> None:
        await _in_thread(self._delete, key)

    async def list_subkeys(self, key: Any) -> list[str]:
        result: list[str] = await _in_thread(self._list_subkeys, key)
        return result


async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    def run() -> Any:
        from django.db import connection

        try:
            return fn(*args)
        finally:
            connection.close()

    return await asyncio.to_thread(run)


# --- the transcript on the run page ----------------------------------------------------------


def transcript(run_id: str) -> list[dict[str, Any]]:
    """What was said in a run's Claude session(s), in order: one dict per message with
    ``role`` (user, assistant, tool), ``text``, ``time`` (ISO 8601, as the SDK stamped it)
    and ``step_id`` (the ledger step of a tool call or tool result; "" for plain text)."""
    from ledger.models import ClaudeSessionEntry

    entries = (
        ClaudeSessionEntry.objects.filter(run_id=run_id, subpath="")
        .order_by("id")
        .values_list("entry", flat=True)
    )
    steps: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    calls = 0
    for entry in entries:
        message = entry.get("message") if isinstance(entry, dict) else None
        if entry.get("type") not in ("user", "assistant") or not isinstance(message, dict):
            continue
        when = str(entry.get("timestamp") or "")
        content = message.get("content")
        if isinstance(content, str):
            out.append(
                {"role": message.get("role", ""), "text": content, "time": when, "step_id": ""}
            )
            continue
        for block in content or []:
            kind = block.get("type")
            if kind == "text" and block.get("text"):
                out.append(
                    {
                        "role": message.get("role", ""),
                        "text": block["text"],
                        "time": when,
                        "step_id": "",
                    }
                )
            elif kind == "tool_use":
                name = _declared_name(block.get("name", ""))
                step_id = f"claude.{calls}.{name}" if name else ""
                calls += 1 if name else 0
                steps[block.get("id", "")] = step_id
                args = canonical.dumps(block.get("input", {}))
                out.append(
                    {
                        "role": "assistant",
                        "text": f"{block.get('name')}({args})",
                        "time": when,
                        "step_id": step_id,
                    }
                )
            elif kind == "tool_result":
                out.append(
                    {
                        "role": "tool",
                        "text": _result_text(block),
                        "time": when,
                        "step_id": steps.get(block.get("tool_use_id", ""), ""),
                    }
                )
    return out


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def _declared_name(wire_name: str) -> str:
    prefix = f"mcp__{SERVER}__"
    return wire_name[len(prefix) :] if wire_name.startswith(prefix) else ""


def _blocks(entries: Sequence[Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(entry, content block) of every message entry of a stored transcript, in order."""
    for entry in entries:
        message = entry.get("message") if isinstance(entry, dict) else None
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            continue
        for block in message["content"]:
            if isinstance(block, dict):
                yield entry, block


def _completed_calls(entries: Sequence[Any]) -> list[tuple[str, dict[str, Any], str]]:
    """The declared tool calls a stored transcript holds with their result, in the order the
    model asked for them: (tool name, arguments, result text)."""
    asked: list[tuple[str, str, dict[str, Any]]] = []
    results: dict[str, str] = {}
    for _entry, block in _blocks(entries):
        if block.get("type") == "tool_use" and _declared_name(block.get("name", "")):
            asked.append((block["id"], _declared_name(block["name"]), block.get("input", {})))
        elif block.get("type") == "tool_result":
            results[block.get("tool_use_id", "")] = _result_text(block)
    done = []
    for ident, name, args in asked:
        if ident not in results:
            break  # the first unanswered call: everything after it is for the model to redo
        done.append((name, args, results[ident]))
    return done


# --- running a session through the ledger ----------------------------------------------------


@dataclasses.dataclass
class _Call:
    """One tool call the model asked for, between the PreToolUse hook and the handler."""

    step_id: str
    tool: Tool
    args: dict[str, Any]
    done: concurrent.futures.Future[Any] = dataclasses.field(
        default_factory=concurrent.futures.Future
    )


class _Session:
    """The bridge between the SDK's event loop (its own thread) and the agent's thread, which
    alone touches the run context: the loop asks, the agent's thread writes the ledger."""

    def __init__(
        self,
        ctx: RunContext,
        tools: Sequence[Tool],
        first_call: int,
        store: LedgerSessionStore,
        session_id: str,
    ) -> None:
        self.ctx = ctx
        self.store = store
        self.session_id = session_id
        self.tools = {t.name: t for t in tools}
        self.requests: queue.Queue[_Call | None] = queue.Queue()
        self.waiting: dict[str, deque[_Call]] = {}
        self.by_use: dict[str, _Call] = {}
        self.next_call = first_call
        self.stopped: BaseException | None = None
        self.lock = threading.Lock()

    # In the agent's thread.

    def serve(self, worker: threading.Thread) -> None:
        """Run the ledger calls the session asks for until the session's thread ends."""
        while True:
            try:
                call = self.requests.get(timeout=0.2)
            except queue.Empty:
                if not worker.is_alive():
                    return
                continue
            if call is None:
                return
            if self.stopped is not None:
                call.done.set_exception(self.stopped)
                continue
            try:
                call.done.set_result(self.ctx.call(call.tool, step=call.step_id, **call.args))
            except BaseException as exc:  # the run stops: after the session, not in the loop
                self.stopped = exc
                call.done.set_exception(exc)

    # In the SDK's event loop.

    async def pre_tool_use(self, data: Any, tool_use_id: str | None, _ctx: Any) -> Any:
        name = _declared_name(data.get("tool_name", ""))
        if not name or name not in self.tools:
            return {}
        if self.stopped is not None:
            return _deny(f"the run stopped: {self.stopped}", stop=True)
        args = data.get("tool_input") or {}
        try:
            args = canonical.normalize(args, step_id=f"claude.{name}")
        except NotJSON as exc:
            return _deny(f"{name}: the arguments are not JSON: {exc}")
        if tool_use_id:
            await self.mirrored(tool_use_id)
        with self.lock:
            call = _Call(f"claude.{self.next_call}.{name}", self.tools[name], args)
            self.next_call += 1
            self.waiting.setdefault(_signature(name, args), deque()).append(call)
            if tool_use_id:
                self.by_use[tool_use_id] = call
        return {}

    async def mirrored(self, tool_use_id: str) -> None:
        """Wait (up to MIRROR_WAIT seconds) until the store holds the model's tool call, so a
        machine lost during the call resumes a transcript that asked for it: the SDK mirrors
        the transcript in the background, and a SIGKILL loses what it had not flushed yet."""
        deadline = asyncio.get_running_loop().time() + MIRROR_WAIT
        while not await _in_thread(self.store.holds_tool_use, self.session_id, tool_use_id):
            if asyncio.get_running_loop().time() > deadline:
                log.warning("tool call %s not mirrored after %ss", tool_use_id, MIRROR_WAIT)
                return
            await asyncio.sleep(0.02)

    async def post_tool_use(self, data: Any, tool_use_id: str | None, _ctx: Any) -> Any:
        if self.stopped is not None and tool_use_id in self.by_use:
            return {
                "continue_": False,
                "stopReason": f"runledger stopped the run: {self.stopped}",
            }
        return {}

    def handler(self, tool: Tool) -> Callable[[dict[str, Any]], Any]:
        async def handle(args: dict[str, Any]) -> dict[str, Any]:
            signature = _signature(tool.name, canonical.normalize(args, step_id=tool.name))
            with self.lock:
                pending = self.waiting.get(signature)
                call = pending.popleft() if pending else None
            if call is None:
                return _error(f"{tool.name} was called without its PreToolUse hook")
            self.requests.put(call)
            try:
                value = await asyncio.wrap_future(call.done)
            except BaseException as exc:
                return _error(f"{tool.name}: {type(exc).__name__}: {exc}")
            return {"content": [{"type": "text", "text": canonical.dumps(value)}]}

        return handle


def _signature(name: str, args: Any) -> str:
    return f"{name}:{canonical.dumps(args)}"


def _deny(reason: str, *, stop: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }
    if stop:
        out["continue_"] = False
        out["stopReason"] = reason
    return out


def _error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "is_error": True}


def check_tools(tools: Sequence[Tool]) -> None:
    """Refuse at registration what the adapter cannot make durable, naming the tool."""
    seen: set[str] = set()
    for t in tools:
        if not isinstance(t, Tool):
            raise AgentDefinitionError(
                f"run_session(tools=...) takes runledger @tool functions, not {t!r}; "
                "declare it with @tool(kind='read') or @tool(kind='effect', reconcile=...)"
            )
        if t.name in seen:
            raise AgentDefinitionError(f"tool {t.name!r} is given twice")
        seen.add(t.name)
        if t.kind == StepKind.EFFECT:
            import inspect

            if "idempotency_key" not in inspect.signature(t.fn).parameters:
                raise AgentDefinitionError(
                    f"effect tool {t.name!r} has no idempotency_key parameter: add "
                    "'*, idempotency_key: str' and pass it to the downstream system"
                )


def _check_options(options: Any) -> None:
    for name in ("session_store", "resume", "session_id", "continue_conversation", "fork_session"):
        if getattr(options, name, None):
            raise AgentDefinitionError(
                f"ClaudeAgentOptions.{name} is set by runledger's adapter (the session is the "
                "run's); leave it unset"
            )
    if SERVER in (options.mcp_servers or {}) if isinstance(options.mcp_servers, dict) else False:
        raise AgentDefinitionError(f"the MCP server name {SERVER!r} is runledger's; rename yours")


def run_session(
    ctx: RunContext,
    prompt: str,
    *,
    tools: Sequence[Tool],
    options: Any = None,
    resume_prompt: str = RESUME_PROMPT,
) -> dict[str, Any]:
    """Run a Claude Agent SDK session as (part of) this run and return its outcome:
    ``{"text": <the final answer>, "session_id": ..., "turns": ...}``.

    ``tools`` are the run's ``@tool`` functions the model may call (served as in-process MCP
    tools); ``options`` the author's ``ClaudeAgentOptions`` (its ``session_store``, ``resume``,
    ``session_id`` and ``fork_session`` belong to the adapter). A run that stops (a started
    effect without a lookup, a stale step) raises as ``ctx.call`` does, after the session ended.
    """
    check_tools(tools)
    opts = options if options is not None else sdk.ClaudeAgentOptions()
    _check_options(opts)
    store = LedgerSessionStore(run_id=ctx.run_id)
    cwd = str(opts.cwd or tempfile.gettempdir())
    project = sdk.project_key_for_directory(cwd)
    session_id = _session_for(ctx.run_id, store, cwd)
    stored = store.load_sync({"project_key": project, "session_id": session_id}) or []

    # Walk the ledger along the calls the transcript already answered (each replays), so the
    # session's new calls continue the recorded step chain.
    done = _completed_calls(stored)
    by_name = {t.name: t for t in tools}
    for i, (name, args, _text) in enumerate(done):
        if name in by_name:
            ctx.call(by_name[name], step=f"claude.{i}.{name}", **args)

    bridge = _Session(ctx, tools, len(done), store, session_id)
    server = sdk.create_sdk_mcp_server(
        SERVER,
        tools=[
            sdk.SdkMcpTool(
                name=t.name,
                description=t.description or t.name,
                input_schema=t.parameters(),
                handler=bridge.handler(t),
            )
            for t in tools
        ],
    )
    hooks = dict(opts.hooks or {})
    matcher = "|".join(f"mcp__{SERVER}__{t.name}" for t in tools)
    hooks["PreToolUse"] = [
        *hooks.get("PreToolUse", []),
        sdk.HookMatcher(matcher=matcher, hooks=[bridge.pre_tool_use]),
    ]
    hooks["PostToolUse"] = [
        *hooks.get("PostToolUse", []),
        sdk.HookMatcher(matcher=matcher, hooks=[bridge.post_tool_use]),
    ]
    mcp = {**(opts.mcp_servers if isinstance(opts.mcp_servers, dict) else {}), SERVER: server}
    allowed = [*opts.allowed_tools, *(f"mcp__{SERVER}__{t.name}" for t in tools)]
    home = tempfile.mkdtemp(prefix="runledger-claude-")  # this machine's var dir, thrown away
    env = {"CLAUDE_CONFIG_DIR": home, **(opts.env or {})}
    if stored:
        session = {"resume": session_id}
        text = resume_prompt
    else:
        session = {"session_id": session_id}
        text = prompt
    run_opts = dataclasses.replace(
        opts,
        cwd=cwd,
        env=env,
        hooks=hooks,
        mcp_servers=mcp,
        allowed_tools=allowed,
        session_store=store,
        session_store_flush="eager",
        **session,
    )
    outcome: dict[str, Any] = {}
    failure: list[BaseException] = []

    async def converse() -> None:
        async for message in sdk.query(prompt=text, options=run_opts):
            if isinstance(message, sdk.ResultMessage):
                outcome.update(
                    text=message.result or "",
                    session_id=message.session_id,
                    turns=message.num_turns,
                    is_error=message.is_error,
                    subtype=message.subtype,
                )

    def in_thread() -> None:
        try:
            asyncio.run(converse())
        except BaseException as exc:
            failure.append(exc)
        finally:
            bridge.requests.put(None)

    worker = threading.Thread(target=in_thread, name=f"claude-session-{ctx.run_id}", daemon=True)
    worker.start()
    try:
        bridge.serve(worker)
    finally:
        worker.join(timeout=60)
        with contextlib.suppress(OSError):
            import shutil

            shutil.rmtree(home, ignore_errors=True)
    if bridge.stopped is not None:
        raise bridge.stopped
    if failure:
        raise failure[0]
    if not outcome:
        raise RuntimeError("the Claude session ended without a result message")
    if outcome.get("is_error"):
        raise RuntimeError(f"the Claude session ended with an error: {outcome.get('subtype')}")
    return {"text": outcome["text"], "session_id": session_id, "turns": outcome["turns"]}


def _session_for(run_id: str, store: LedgerSessionStore, cwd: str) -> str:
    """The run's session id; a fork's first execution starts from a fork of its parent's."""
    from ledger.models import ClaudeSessionEntry, Run

    bound = (
        ClaudeSessionEntry.objects.filter(run_id=run_id, subpath="")
        .values_list("session_id", flat=True)
        .first()
    )
    if bound:
        return bound
    run = (
        Run.objects.filter(run_id=run_id)
        .values("parent_id", "parent_kind", "forked_from_step_id")
        .first()
    )
    if run and run["parent_kind"] == "fork" and run["parent_id"]:
        parent = (
            ClaudeSessionEntry.objects.filter(run_id=run["parent_id"], subpath="")
            .values_list("session_id", flat=True)
            .first()
        )
        if parent:
            return _fork(run_id, parent, run["forked_from_step_id"], store, cwd)
    return session_id_for(run_id)


def _fork(
    run_id: str, parent_session: str, step_id: str, store: LedgerSessionStore, cwd: str
) -> str:
    """Fork the parent's session after the tool result of ``step_id`` (the whole transcript
    when the step is not one of its tool calls) into a session bound to ``run_id``."""
    project = sdk.project_key_for_directory(cwd)
    entries = store.load_sync({"project_key": project, "session_id": parent_session}) or []
    cut = _entry_after_step(entries, step_id)
    # The fork's entries are bound to the fork's run. Duck-typed: the SDK probes for the
    # optional methods, which mypy's view of its Protocol does not allow for.
    fork_store = cast(Any, LedgerSessionStore(run_id=run_id))

    async def fork() -> str:
        result = await sdk.fork_session_via_store(
            fork_store, parent_session, directory=cwd, up_to_message_id=cut
        )
        return str(result.session_id)

    return _run_async(fork)


def _entry_after_step(entries: Sequence[Any], step_id: str) -> str | None:
    """The uuid of the transcript entry holding the tool result of ``claude.<n>.<tool>``."""
    parts = step_id.split(".")
    if len(parts) < 3 or parts[0] != "claude" or not parts[1].isdigit():
        return None
    wanted = int(parts[1])
    ids: list[str] = []
    for entry, block in _blocks(entries):
        if block.get("type") == "tool_use" and _declared_name(block.get("name", "")):
            ids.append(block["id"])
        elif (
            block.get("type") == "tool_result"
            and wanted < len(ids)
            and block.get("tool_use_id") == ids[wanted]
        ):
            return str(entry["uuid"]) if entry.get("uuid") else None
    return None


def _run_async(make: Callable[[], Any]) -> Any:
    box: list[Any] = []
    errors: list[BaseException] = []

    def go() -> None:
        try:
            box.append(asyncio.run(make()))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=go)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return box[0]


__all__ = [
    "RESUME_PROMPT",
    "LedgerSessionStore",
    "check_tools",
    "check_version",
    "run_session",
    "session_id_for",
    "transcript",
]


register_transcript("claude-agent-sdk", transcript)
