"""A Claude Agent SDK session run durably inside a runledger agent (extra: claude-agent-sdk).

    from claude_agent_sdk import ClaudeAgentOptions
    from ledger.adapters.claude_agent_sdk import run_session

    @agent("claude_refund", plan_version="1", tools=[fetch_invoice, refund_charge, notify_team])
    def claude_refund(ctx, inputs):
        return run_session(ctx, inputs["prompt"], tools=[fetch_invoice, refund_charge, notify_team],
                           options=ClaudeAgentOptions(model="claude-sonnet-4-5"))

What it does with the SDK's own extension points:

- **Model requests** (``ledger.adapters.claude_model_proxy``): the CLI's Messages API requests
  go through a loopback proxy the session owns (``ANTHROPIC_BASE_URL``). Each request of the
  main conversation is a model step ``claude.model.<n>`` hashed over the request that matters:
  recorded, it is answered from the ledger (a changed request is a stale step); new, it is
  forwarded to the configured upstream, recorded whole, then answered. Side requests pass
  through unrecorded.
- **Tools**: the author's ``@tool`` functions are served to the CLI as in-process SDK MCP tools
  (``mcp__runledger__<name>``). A ``PreToolUse`` hook gives each call its step id
  (``claude.<n>.<tool>``: the n-th tool call of the session, in the order the model asked) and
  refuses arguments that are not JSON; the tool's handler passes the call through the ledger
  (``ctx.call``: a read executes then commits; an effect commits its intent, is sent with the
  effect key as its idempotency key, then commits its result). A started effect is reconciled
  through its lookup, or, without one, the ``PostToolUse`` hook stops the session and the run
  waits for a person (``needs_attention``/reconciliation).
- **Resume**: every execution runs the session again from its prompt, as the engine re-executes
  an agent from the top: the recorded model answers and tool results replay, so the CLI walks
  the same conversation to the first request the ledger does not hold, and goes on from there.
  A fork (``run_fork``) is the same walk over the copied ledger.
- **Transcript** (``SessionStore``): ``LedgerSessionStore`` keeps every transcript line the CLI
  writes in the ledger's database (``ClaudeSessionEntry``), bound to the run, one session per
  execution (the first one's id is ``session_id_for(run_id)``): what was said, off the node.

A dry replay (the run page's preview) runs the CLI too, against the ledger only: the proxy
answers from the ledger and forwards nothing, and no transcript is stored.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import os
import queue
import shutil
import tempfile
import threading
import uuid
import warnings
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ledger import canonical, faultpoints
from ledger.adapters import claude_model_proxy as proxy
from ledger.adapters import register_transcript
from ledger.adapters._effect import CurrentEffect
from ledger.errors import AgentDefinitionError, NotJSON
from ledger.registry import Tool, require_idempotency_key
from ledger.states import StepKind

if TYPE_CHECKING:
    from ledger.engine import RunContext

try:
    import claude_agent_sdk as sdk
    import httpx
except ImportError as exc:  # pragma: no cover - depends on the extra
    raise ImportError(
        "ledger.adapters.claude_agent_sdk needs the Claude Agent SDK: "
        "pip install 'runledger[claude-agent-sdk]'"
    ) from exc

#: The SDK versions this adapter is written and tested against (the extra pins the same).
SUPPORTED = ((0, 2, 184), (0, 3, 0))
SERVER = "runledger"
#: Unused since a resumed session runs again from its prompt (kept for old imports).
RESUME_PROMPT = "Continue from where the conversation stopped; do not repeat finished tool calls."
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
    from django.db.models import Count, Max

    from ledger.models import ClaudeSessionEntry

    # Each execution runs the session again (replaying what the ledger holds), each in its own
    # session: the one that got furthest (the most entries; the latest of equals) says it all.
    sessions = (
        ClaudeSessionEntry.objects.filter(run_id=run_id, subpath="")
        .values("session_id")
        .annotate(n=Count("id"), last=Max("id"))
        .order_by("-n", "-last")
    )
    shown = sessions.first()
    entries = (
        ClaudeSessionEntry.objects.filter(
            run_id=run_id, subpath="", session_id=shown["session_id"] if shown else ""
        )
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


@dataclasses.dataclass
class _ModelCall:
    """One request of the session's main conversation, from the proxy to the agent's thread."""

    request: proxy.Forwarded
    body: dict[str, Any]
    done: concurrent.futures.Future[proxy.Answer] = dataclasses.field(
        default_factory=concurrent.futures.Future
    )


class _Session:
    """The bridge between the SDK's event loop (its own thread) and the agent's thread, which
    alone touches the run context: the loop asks, the agent's thread writes the ledger.

    Model requests and tool calls reach the agent's thread through one queue, in the order
    the CLI makes them (it asks the model, runs the tools of the answer, asks again), so the
    step chain is the conversation's order, the same on every execution.
    """

    def __init__(self, ctx: RunContext, tools: Sequence[Tool], *, dry: bool, upstream: str) -> None:
        self.ctx = ctx
        self.dry = dry
        self.upstream = upstream
        self.tools = {t.name: t for t in tools}
        self.requests: queue.Queue[_Call | _ModelCall | None] = queue.Queue()
        self.waiting: dict[str, deque[_Call]] = {}
        self.by_use: dict[str, _Call] = {}
        self.next_call = 0
        self.next_model = 0
        self.asking = 0  # main-conversation requests in flight
        self.stopped: BaseException | None = None
        self.upstream_errors: list[str] = []
        self.lock = threading.Lock()
        self.wire: dict[str, str] = {}  # an author's MCP tool: its wire name -> its name
        self.loop: asyncio.AbstractEventLoop | None = None  # the session's (its handlers')

    # In the agent's thread.

    def serve(self, worker: threading.Thread) -> None:
        """Run the ledger calls the session asks for until the session's thread ends."""
        with httpx.Client(timeout=httpx.Timeout(proxy.UPSTREAM_TIMEOUT, connect=30.0)) as client:
            while True:
                try:
                    call = self.requests.get(timeout=0.2)
                except queue.Empty:
                    if not worker.is_alive():
                        return
                    continue
                if call is None:
                    return
                if isinstance(call, _ModelCall):
                    call.done.set_result(self._answer(call, client))
                else:
                    self._tool(call)

    def _tool(self, call: _Call) -> None:
        if self.stopped is not None:
            call.done.set_exception(self.stopped)
            return
        try:
            call.done.set_result(self.ctx.call(call.tool, step=call.step_id, **call.args))
        except BaseException as exc:  # the run stops: after the session, not in the loop
            self.stopped = exc
            call.done.set_exception(exc)

    def _answer(self, call: _ModelCall, client: httpx.Client) -> proxy.Answer:
        """A main-conversation request as a model step ``claude.model.<n>``: answered from the
        ledger when recorded (or refused as stale), else forwarded and, once whole, recorded."""
        if self.stopped is not None:
            return _stopped_answer(self.stopped)
        step = f"claude.model.{self.next_model}"
        inputs = proxy.request_that_matters(call.body, call.request.headers)
        model = str(call.body.get("model", ""))
        try:
            if self.dry or self.ctx.recorded(step=step):
                result = self.ctx.model_request(inputs, send=_never_sent, model=model, step=step)
            else:
                faultpoints.point("claude.model.before_forward")
                answer = proxy.forward(self.upstream, call.request, client)
                if not answer.complete:  # nothing is recorded; the CLI retries what it retries
                    self.upstream_errors.append(answer.summary())
                    if answer.status == 200:  # a cut-off stream: say so, as a retryable 502
                        return proxy.error_answer(502, "api_error", answer.summary())
                    return answer
                record = answer.record()
                result = self.ctx.model_request(
                    inputs, send=lambda _request: record, model=model, step=step
                )
                faultpoints.point("claude.model.after_record")
        except BaseException as exc:  # a stale step, a lost lease, the dry replay's end
            self.stopped = exc
            return _stopped_answer(exc)
        self.next_model += 1
        return proxy.Answer.recorded(result)

    # In the SDK's event loop.

    async def on_step(self, request: proxy.Forwarded, body: dict[str, Any]) -> proxy.Answer:
        self.asking += 1
        try:
            if self.asking > 1:
                log.warning(
                    "run %s: two model requests of the main conversation at once; their step "
                    "ids follow the order they arrived in, which a resume may not repeat",
                    self.ctx.run_id,
                )
            call = _ModelCall(request, body)
            self.requests.put(call)
            return await asyncio.wrap_future(call.done)
        finally:
            self.asking -= 1

    async def pre_tool_use(self, data: Any, tool_use_id: str | None, _ctx: Any) -> Any:
        wire_name = data.get("tool_name", "")
        name = _declared_name(wire_name) or self.wire.get(wire_name, "")
        if not name or name not in self.tools:
            return {}
        if self.stopped is not None:
            return _deny(f"the run stopped: {self.stopped}", stop=True)
        args = data.get("tool_input") or {}
        try:
            args = canonical.normalize(args, step_id=f"claude.{name}")
        except NotJSON as exc:
            return _deny(f"{name}: the arguments are not JSON: {exc}")
        with self.lock:
            call = _Call(f"claude.{self.next_call}.{name}", self.tools[name], args)
            self.next_call += 1
            self.waiting.setdefault(_signature(name, args), deque()).append(call)
            if tool_use_id:
                self.by_use[tool_use_id] = call
        return {}

    async def post_tool_use(self, data: Any, tool_use_id: str | None, _ctx: Any) -> Any:
        if self.stopped is not None and tool_use_id in self.by_use:
            return {
                "continue_": False,
                "stopReason": f"runledger stopped the run: {self.stopped}",
            }
        return {}

    def handler(self, tool: Tool) -> Callable[[dict[str, Any]], Any]:
        async def handle(args: dict[str, Any]) -> dict[str, Any]:
            self.loop = asyncio.get_running_loop()
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


def _never_sent(_request: dict[str, Any]) -> Any:
    """The send of a step that must replay (or, in a dry replay, is only compared)."""
    raise RuntimeError("runledger's model proxy: a recorded model step was about to be sent")


def _stopped_answer(exc: BaseException) -> proxy.Answer:
    # 400 invalid_request_error: the CLI does not retry it, and ends the session.
    return proxy.error_answer(
        400, "invalid_request_error", f"runledger stopped the run: {type(exc).__name__}: {exc}"
    )


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
            require_idempotency_key(t.name, t.fn)


def _check_options(options: Any) -> None:
    for name in ("session_store", "resume", "session_id", "continue_conversation", "fork_session"):
        if getattr(options, name, None):
            raise AgentDefinitionError(
                f"ClaudeAgentOptions.{name} is set by runledger's adapter (the session is the "
                "run's); leave it unset"
            )
    if SERVER in (options.mcp_servers or {}) if isinstance(options.mcp_servers, dict) else False:
        raise AgentDefinitionError(f"the MCP server name {SERVER!r} is runledger's; rename yours")


def upstream_of(options: Any) -> str:
    """The Messages API the session's requests go to: the ``ANTHROPIC_BASE_URL`` of the
    options' env, else of this process's environment, else Anthropic's."""
    configured = (options.env or {}).get("ANTHROPIC_BASE_URL") or os.environ.get(
        "ANTHROPIC_BASE_URL"
    )
    return str(configured or proxy.DEFAULT_UPSTREAM)


def run_session(
    ctx: RunContext,
    prompt: str,
    *,
    tools: Sequence[Tool],
    options: Any = None,
    resume_prompt: str | None = None,
    effects: Mapping[str, Lookup | None] | None = None,
) -> dict[str, Any]:
    """Run a Claude Agent SDK session as (part of) this run and return its outcome:
    ``{"text": <the final answer>, "session_id": <the run's session id>, "turns": ...}``.

    ``tools`` are the run's ``@tool`` functions the model may call (served as in-process MCP
    tools); ``options`` the author's ``ClaudeAgentOptions`` (its ``session_store``, ``resume``,
    ``session_id`` and ``fork_session`` belong to the adapter). Every execution runs the
    session from ``prompt``: the model's recorded answers and the recorded tool results replay
    from the ledger, and only what the ledger does not hold is asked or done. A run that stops
    (a started effect without a lookup, a stale step) raises as ``ctx.call`` does, after the
    session ended.

    The tools of the author's own in-process MCP servers (``create_sdk_mcp_server`` in
    ``options.mcp_servers``) pass the same hooks: each call is a step ``claude.<n>.<tool>``, a
    read, or an effect when ``effects={"<tool>": lookup}`` names it (intent row first, the key
    as ``effect_key()`` inside the tool's handler, ``lookup(idempotency_key)`` after a crash
    inside it; ``None``: a person decides).
    """
    if resume_prompt is not None:
        warnings.warn(
            "run_session(resume_prompt=) is deprecated and ignored: a resumed session is run "
            "again from its prompt, its model answers replayed from the ledger",
            DeprecationWarning,
            stacklevel=2,
        )
    check_tools(tools)
    opts = options if options is not None else sdk.ClaudeAgentOptions()
    _check_options(opts)
    authors = _author_servers(opts, tools, _check_effects(effects))
    dry = ctx.fencing_token is None  # a dry replay (the run page's preview) writes nothing
    cwd = str(opts.cwd or tempfile.gettempdir())
    session_id = _dry_session(ctx.run_id) if dry else _execution_session(ctx.run_id)
    bridge = _Session(ctx, [*tools, *authors.tools], dry=dry, upstream=upstream_of(opts))
    bridge.wire = dict(authors.wire)
    authors.bridge = bridge
    model_proxy = proxy.ModelProxy(
        upstream=bridge.upstream,
        tool_prefix=f"mcp__{SERVER}__",
        on_step=bridge.on_step,
        pass_through=not dry,
    )
    home = tempfile.mkdtemp(prefix="runledger-claude-")  # this machine's var dir, thrown away
    env = {
        "CLAUDE_CONFIG_DIR": home,
        # No side requests (title generation, telemetry) unless the author asks for them.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        **(opts.env or {}),
    }
    if dry and not any(
        k in env or k in os.environ for k in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
    ):
        env["ANTHROPIC_API_KEY"] = "runledger-dry-replay"  # the CLI wants one; nothing is sent
    store = {} if dry else {"session_store": LedgerSessionStore(run_id=ctx.run_id)}
    base = dataclasses.replace(
        opts,
        cwd=cwd,
        hooks=_hooks(opts, bridge, tools, list(authors.wire)),
        mcp_servers={**_servers(opts, bridge, tools), **authors.servers(bridge)},
        allowed_tools=[
            *opts.allowed_tools,
            *(f"mcp__{SERVER}__{t.name}" for t in tools),
            *authors.wire,
        ],
        session_store_flush="eager",
        session_id=session_id,
        **store,
    )
    outcome: dict[str, Any] = {}
    failure: list[BaseException] = []

    async def converse() -> None:
        async with model_proxy.serving() as url:
            run_opts = dataclasses.replace(base, env={**env, "ANTHROPIC_BASE_URL": url})
            async for message in sdk.query(prompt=prompt, options=run_opts):
                if isinstance(message, sdk.ResultMessage):
                    outcome.update(
                        text=message.result or "",
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
        shutil.rmtree(home, ignore_errors=True)
    if bridge.stopped is not None:
        raise bridge.stopped
    if outcome and not outcome.get("is_error"):
        return {
            "text": outcome["text"],
            "session_id": session_id_for(ctx.run_id),
            "turns": outcome["turns"],
        }
    why = f"; the last: {bridge.upstream_errors[-1]}" if bridge.upstream_errors else ""
    if failure:
        raise RuntimeError(f"the Claude session failed: {failure[0]}{why}") from failure[0]
    if not outcome:
        raise RuntimeError(f"the Claude session ended without a result message{why}")
    raise RuntimeError(f"the Claude session ended with an error: {outcome.get('subtype')}{why}")


def _hooks(
    opts: Any, bridge: _Session, tools: Sequence[Tool], wire: Sequence[str] = ()
) -> dict[Any, Any]:
    hooks = dict(opts.hooks or {})
    matcher = "|".join([*(f"mcp__{SERVER}__{t.name}" for t in tools), *wire])
    hooks["PreToolUse"] = [
        *hooks.get("PreToolUse", []),
        sdk.HookMatcher(matcher=matcher, hooks=[bridge.pre_tool_use]),
    ]
    hooks["PostToolUse"] = [
        *hooks.get("PostToolUse", []),
        sdk.HookMatcher(matcher=matcher, hooks=[bridge.post_tool_use]),
    ]
    return hooks


def _servers(opts: Any, bridge: _Session, tools: Sequence[Tool]) -> dict[str, Any]:
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
    return {**(opts.mcp_servers if isinstance(opts.mcp_servers, dict) else {}), SERVER: server}


# --- the author's own in-process MCP servers --------------------------------------------------

#: An effect's lookup: did the call with this key happen? (its result, or NOT_HAPPENED / None)
Lookup = Callable[..., Any]
#: The effect key and fencing token of the author's MCP tool running now as an effect step.
_EFFECT = CurrentEffect(
    "runledger_claude_effect",
    'the handler of an MCP tool that run_session(effects={"<tool>": lookup}) declares an effect',
)


def effect_key() -> str:
    """Inside the handler of an author's MCP tool that ``run_session(effects=...)`` names,
    while it runs as its effect step: the effect's key (``<run id>:<step id>``), stable across
    crashes and resumes. Send it as the downstream's idempotency key; the lookup receives it."""
    return _EFFECT.key()


def _check_effects(effects: Any) -> dict[str, Lookup | None]:
    if effects is None:
        return {}
    if not isinstance(effects, Mapping):
        raise AgentDefinitionError(
            "run_session(effects=...) maps the names of your MCP servers' tools to their "
            f'lookups (or None), e.g. effects={{"post_entry": find_entry}}, not {effects!r}'
        )
    for name, lookup in effects.items():
        if lookup is not None and not callable(lookup):
            raise AgentDefinitionError(
                f"run_session(effects={{{name!r}: ...}}) takes a lookup of the effect key "
                f"(or None: a crash inside it stops the run for a person), not {lookup!r}"
            )
    return dict(effects)


@dataclasses.dataclass
class _Authors:
    """The author's in-process MCP servers, their tools as ledger tools (``wire``: the CLI's
    name of each, ``mcp__<server>__<tool>``, to its ledger name)."""

    tools: list[Tool] = dataclasses.field(default_factory=list)
    wire: dict[str, str] = dataclasses.field(default_factory=dict)
    made: dict[str, tuple[str, list[Any], Any]] = dataclasses.field(default_factory=dict)
    bridge: _Session | None = None

    def servers(self, bridge: _Session) -> dict[str, Any]:
        """Each server again, its calls through the ledger (the same hooks as runledger's)."""
        from claude_agent_sdk._internal._mcp_compat import build_tool_server
        from mcp.types import CallToolResult

        out: dict[str, Any] = {}
        for name, (version, listed, _call) in self.made.items():
            by_name = {t.name: t for t in self.tools if f"mcp__{name}__{t.name}" in self.wire}

            async def run_tool(
                tool_name: str, arguments: dict[str, Any], by_name: dict[str, Tool] = by_name
            ) -> Any:
                tool = by_name.get(tool_name)
                if tool is None:
                    return CallToolResult.model_validate(
                        {
                            "content": [{"type": "text", "text": f"no tool {tool_name}"}],
                            "isError": True,
                        }
                    )
                got = await bridge.handler(tool)(arguments)
                if got.get("is_error"):
                    return CallToolResult.model_validate(
                        {"content": got["content"], "isError": True}
                    )
                value = canonical.loads(got["content"][0]["text"])
                return CallToolResult.model_validate(value)

            server = build_tool_server(name, version, listed, run_tool)
            out[name] = {"type": "sdk", "name": name, "instance": server}
        return out


def _author_servers(
    opts: Any, tools: Sequence[Tool], effects: Mapping[str, Lookup | None]
) -> _Authors:
    """The tools of the author's in-process SDK MCP servers, each a ledger tool whose call runs
    the server's own handler. A name in ``effects`` that none of them offers is refused."""
    found = _Authors()
    servers = opts.mcp_servers if isinstance(opts.mcp_servers, dict) else {}
    taken = {t.name for t in tools}
    for server_name, config in servers.items():
        if not (isinstance(config, dict) and config.get("type") == "sdk"):
            continue
        instance = config.get("instance")
        handlers = getattr(instance, "_request_handlers", None)
        if not isinstance(handlers, dict) or "tools/call" not in handlers:
            raise AgentDefinitionError(
                f"MCP server {server_name!r}: its tools cannot be steps under this mcp version "
                "(runledger's adapter reads an mcp 2 server's handlers)"
            )
        listing = asyncio.run(_list(handlers["tools/list"].handler))
        call = handlers["tools/call"].handler
        version = str(getattr(instance, "version", None) or "1.0.0")
        found.made[server_name] = (version, list(listing.tools), call)
        for listed in listing.tools:
            if listed.name in taken:
                raise AgentDefinitionError(
                    f"tool {listed.name!r} of MCP server {server_name!r} has the name of "
                    "another tool of the session: step ids name tools; rename one"
                )
            taken.add(listed.name)
            found.wire[f"mcp__{server_name}__{listed.name}"] = listed.name
            found.tools.append(_author_tool(listed, call, effects, found))
    unknown = sorted(set(effects) - set(found.wire.values()))
    if unknown:
        raise AgentDefinitionError(
            f"run_session(effects=...) names {', '.join(map(repr, unknown))}, which none of "
            "the options' in-process MCP servers (create_sdk_mcp_server) offers: only their "
            "tools' calls pass through runledger's hooks"
        )
    return found


async def _list(handler: Any) -> Any:
    from mcp.types import PaginatedRequestParams

    return await handler(None, PaginatedRequestParams())


def _author_tool(
    listed: Any, call: Any, effects: Mapping[str, Lookup | None], authors: _Authors
) -> Tool:
    """An author's MCP tool as a ledger tool: its step runs the server's own handler (on the
    session's loop) and records the MCP result as JSON."""
    from mcp.types import CallToolRequestParams

    effect = listed.name in effects

    def fn(
        *, idempotency_key: str | None = None, fencing_token: int | None = None, **args: Any
    ) -> Any:
        bridge = authors.bridge
        assert bridge is not None

        async def invoke() -> Any:
            marked = _EFFECT.set((idempotency_key, fencing_token)) if effect else None
            try:
                params = CallToolRequestParams(name=listed.name, arguments=args)
                return await call(None, params)
            finally:
                if marked is not None:
                    _EFFECT.reset(marked)

        assert bridge.loop is not None
        result = asyncio.run_coroutine_threadsafe(invoke(), bridge.loop).result()
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    lookup = effects.get(listed.name)
    return _AuthorTool(
        name=listed.name,
        kind="effect" if effect else "read",
        fn=fn,
        reconcile=lookup,
        description=listed.description or "",
        takes_fencing_token=effect,
        schema_json=canonical.dumps(listed.input_schema or {}),
    )


@dataclasses.dataclass(frozen=True)
class _AuthorTool(Tool):
    """An author's MCP tool as the ledger sees it: parameters are its MCP input schema."""

    schema_json: str = "{}"

    def parameters(self) -> dict[str, Any]:
        schema: dict[str, Any] = canonical.loads(self.schema_json)
        return schema

    def schema(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "parameters": self.parameters(),
            "reconcile": self.reconcile is not None,
            "description": self.description,
        }


def _execution_session(run_id: str) -> str:
    """The session id of this execution of the run: the run's own (``session_id_for``) for
    the first execution that stores a transcript, then one more per execution that did. Each
    execution runs the session again from its prompt (replaying from the ledger), so each
    writes its own transcript instead of appending the conversation again to the last one."""
    from ledger.models import ClaudeSessionEntry

    held = (
        ClaudeSessionEntry.objects.filter(run_id=run_id, subpath="")
        .values_list("session_id", flat=True)
        .distinct()
        .count()
    )
    return session_id_for(run_id) if held == 0 else str(uuid.uuid5(_NAMESPACE, f"{run_id}#{held}"))


def _dry_session(run_id: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{run_id}#dry-replay"))


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
