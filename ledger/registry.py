"""Registered agents and tools, and the decorators agent authors use to register them."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ledger import pacing, ratelimits
from ledger.canonical import dumps, hash_text
from ledger.errors import AgentDefinitionError, InvalidInput
from ledger.ratelimits import Rate
from ledger.retry import RetryPolicy
from ledger.schemas import HIDDEN_PARAMS, parameters_schema
from ledger.teams import is_team


class _NotHappened:
    """A reconcile answer: the downstream system has no effect under this key."""

    def __repr__(self) -> str:
        return "NOT_HAPPENED"


#: Return this from a reconcile function when the downstream system proves the effect did not
#: happen (e.g. a lookup by idempotency key finds nothing): the step executes again with the
#: same effect key. Return ``None`` when it cannot know, and the result when it happened.
NOT_HAPPENED = _NotHappened()

ToolKind = Literal["pure", "read", "effect"]
Durability = Literal["step", "batched"]
Reconcile = Callable[[str], Any]
#: ``list_keys(prefix)``: the effect keys the downstream system holds that start with prefix.
ListKeys = Callable[[str], Iterable[str]]
RESERVED_PARAMS = {"step", "approval"}
OnReject = Literal["raise", "fail"]
TITLE_CHARS = 200
LABEL_CHARS = 100


@dataclass(frozen=True)
class Approval:
    """An effect that a person approves before it is sent (``@tool(approval=...)``, or
    ``ctx.call(tool, approval=...)`` for one call).

    ``approvers``: 1, or 2 distinct people (four eyes). ``on_reject``: ``"raise"`` (the call
    raises ``ApprovalRejected`` in the agent, which may handle it) or ``"fail"`` (the run
    fails). ``expires_after``: seconds the gate stays open (None:
    RUNLEDGER_APPROVAL_EXPIRES_SECONDS).
    """

    approvers: int = 1
    on_reject: OnReject = "raise"
    expires_after: float | None = None

    def __post_init__(self) -> None:
        if self.approvers not in (1, 2):
            raise AgentDefinitionError(f"approvers must be 1 or 2, not {self.approvers!r}")
        if self.on_reject not in ("raise", "fail"):
            raise AgentDefinitionError(f"on_reject must be raise or fail, not {self.on_reject!r}")
        after = self.expires_after
        if after is not None and not (isinstance(after, int | float) and after > 0):
            raise AgentDefinitionError(f"expires_after must be seconds > 0, not {after!r}")


def approval_policy(value: Approval | bool | None, *, kind: str, name: str) -> Approval | None:
    """``approval=`` as given (True, False/None, or an ``Approval``), checked."""
    if value is None or value is False:
        return None
    if kind != "effect":
        raise AgentDefinitionError(f"tool {name!r}: only effects can wait for an approval")
    if value is True:
        return Approval()
    if not isinstance(value, Approval):
        raise AgentDefinitionError(
            f"tool {name!r}: approval must be True or an Approval(...), not {value!r}"
        )
    return value


@dataclass(frozen=True)
class Tool:
    name: str
    kind: ToolKind
    fn: Callable[..., Any]
    reconcile: Reconcile | None = None
    retries: int = 0
    ttl_seconds: float | None = None
    description: str = ""
    #: The tool (an effect) and its reconcile declare ``fencing_token``: they receive the
    #: execution's fencing token, which grows with every takeover of the run.
    takes_fencing_token: bool = False
    reconcile_takes_fencing_token: bool = False
    list_keys: ListKeys | None = None
    #: How a failed call is retried (``ledger.retry``); ``retries`` is its number of retries.
    retry: RetryPolicy | None = field(default=None, hash=False)  # hashed per model call

    def __post_init__(self) -> None:
        if self.retry is None:
            object.__setattr__(self, "retry", RetryPolicy(retries=self.retries))

    @property
    def policy(self) -> RetryPolicy:
        assert self.retry is not None  # set by __post_init__
        return self.retry

    #: A person approves each call before it is sent (see ``Approval``); None: no gate.
    approval: Approval | None = None
    #: ``fn`` is an ``async def``: only an async agent may call it (``await ctx.call``).
    is_async: bool = False
    #: At most so many calls per period across the fleet (``ledger.ratelimits``); None: none.
    rate_limit: Rate | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    @property
    def reconcile_is_async(self) -> bool:
        return self.reconcile is not None and is_async(self.reconcile)

    def schema(self) -> dict[str, Any]:
        """What the tool-schema hash covers: name, kind, parameters (names, JSON types and
        defaults, as a model sees them), whether it can be reconciled, and its description."""
        params = [p for p in inspect.signature(self.fn).parameters if p not in HIDDEN_PARAMS]
        return {
            "name": self.name,
            "kind": self.kind,
            "params": params,
            "parameters": self.parameters(),
            "reconcile": self.reconcile is not None,
            "description": self.description,
        }

    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the tool's parameters, derived from its signature."""
        return parameters_schema(self.fn)


@dataclass(frozen=True)
class Agent:
    name: str
    fn: Callable[..., Any]
    plan_version: str
    divergence: Literal["refuse", "replan"]
    max_resumes: int | None
    tools: tuple[Tool, ...] = field(default=())
    description: str = ""
    title: str | Callable[[dict[str, Any]], str] = ""
    labels: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    #: "step": every step commits before its result is returned. "batched": read, model and
    #: clock steps commit together (see ``ledger.engine.batch``); effects never wait.
    durability: Durability = "step"
    #: Batched durability's bounds for this agent; None takes RUNLEDGER_BATCH_MAX_STEPS/_MS.
    batch_steps: int | None = None
    batch_ms: float | None = None
    #: ``fn`` is an ``async def``: its context's calls are awaited (``AsyncRunContext``).
    is_async: bool = False
    #: The declared concurrency key (made from the inputs) and limit; None: no key.
    concurrency: pacing.Concurrency | None = None
    #: Seconds from a run's start to its deadline; None: no deadline.
    deadline: float | None = None
    #: The team its runs belong to (``ledger.teams``); "" takes RUNLEDGER_DEFAULT_TEAM.
    team: str = ""

    def check_inputs(self, inputs: Any) -> None:
        """Raise ``InvalidInput`` unless ``inputs`` suits this agent: a JSON object holding
        every key in ``requires`` (checked before a run is written, never by a failed run)."""
        if not self.requires:
            return
        if not isinstance(inputs, dict):
            raise InvalidInput(
                f"agent {self.name!r} takes a JSON object as inputs "
                f"(with {', '.join(self.requires)}), not {type(inputs).__name__}"
            )
        missing = [k for k in self.requires if inputs.get(k) in (None, "")]
        if missing:
            raise InvalidInput(f"agent {self.name!r} needs inputs {', '.join(missing)}")

    def title_for(self, inputs: Any) -> str:
        """The run's one-line title from its inputs; "" when none is declared or it cannot be
        made (a title never stops a run from starting)."""
        data = inputs if isinstance(inputs, dict) else {}
        try:
            text = self.title(data) if callable(self.title) else self.title.format_map(data)
        except (KeyError, IndexError, ValueError, TypeError, AttributeError):
            return ""
        return " ".join(str(text).split())[:TITLE_CHARS]

    def labels_for(self, inputs: Any) -> dict[str, str]:
        """The declared input keys whose values are scalars, as text: a run's labels."""
        data = inputs if isinstance(inputs, dict) else {}
        return {
            key: str(data[key])[:LABEL_CHARS]
            for key in self.labels
            if isinstance(data.get(key), str | int | float) and not isinstance(data[key], bool)
        }

    @property
    def tool_schema_hash(self) -> str:
        schemas = sorted((t.schema() for t in self.tools), key=lambda s: s["name"])
        return hash_text(dumps(schemas))

    @property
    def code_version(self) -> str:
        try:
            source = inspect.getsource(self.fn)
        except (OSError, TypeError):
            return ""
        return hash_text(source)[:16]


def is_async(fn: Any) -> bool:
    """Whether calling ``fn`` gives a coroutine: an ``async def``, also behind a
    ``functools.partial`` or as a callable object's ``async def __call__``."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(type(fn), "__call__", None)  # noqa: B004 (a callable object's own method)
    return not inspect.isroutine(fn) and inspect.iscoroutinefunction(call)


def _refuse_async(fn: Any, what: str) -> None:
    """``fn`` is called where no loop waits for it (a sync process): an ``async def`` is a
    definition error now, not a coroutine where a value was expected later."""
    if fn is not None and (is_async(fn) or inspect.isasyncgenfunction(fn)):
        raise AgentDefinitionError(f"{what} must be a plain function, not an async def")


def require_idempotency_key(name: str, fn: Callable[..., Any]) -> None:
    """Refuse effect tool ``name`` unless ``fn`` accepts ``idempotency_key`` (the step's effect
    key, which the engine passes and the service must be given). The one check ``@tool`` and the
    framework adapters make of an effect."""
    if "idempotency_key" not in inspect.signature(fn).parameters:
        raise AgentDefinitionError(
            f"effect tool {name!r} has no idempotency_key parameter: add a keyword parameter "
            "'*, idempotency_key: str' (the engine passes the step's effect key) and pass it "
            "to the service, so a retried call is the same call"
        )


_agents: dict[str, Agent] = {}
_tools: dict[str, Tool] = {}
_import_errors: dict[str, str] = {}


def tool(
    name: str | None = None,
    *,
    kind: ToolKind = "read",
    reconcile: Reconcile | None = None,
    retries: int | None = None,
    ttl_seconds: float | None = None,
    list_keys: ListKeys | None = None,
    backoff: float | None = None,
    backoff_factor: float | None = None,
    backoff_max: float | None = None,
    jitter: float | None = None,
    non_retryable: tuple[type[BaseException], ...] | type[BaseException] = (),
    approval: Approval | bool | None = None,
    rate_limit: str | None = None,
) -> Callable[[Callable[..., Any]], Tool]:
    """Register a function as a tool the run context can call.

    ``kind="effect"`` tools receive ``idempotency_key=`` (the step's effect key, kept across
    attempts) and should pass ``reconcile``: a function of the effect key that asks the
    downstream system what happened (the result, ``NOT_HAPPENED``, or ``None`` for unknown).
    An effect or a reconcile that declares a ``fencing_token`` parameter also receives the
    execution's fencing token (an integer that grows with every takeover of the run), for a
    provider that can refuse a stale lease holder (``ledger.engine.fence``).
    Reads and model calls retry twice by default; effects do not retry unless told to.
    A retry waits an exponential back-off with jitter: ``backoff`` seconds (default 0.5) times
    ``backoff_factor`` (2) per retry, at most ``backoff_max`` (30), less up to the fraction
    ``jitter`` (0.5) at random; a tool that raises ``RetryAfter(seconds)`` is waited for that
    long instead. Exceptions of a type in ``non_retryable`` are never retried, nor are the
    engine's own deterministic errors (``ledger.retry``). A policy that makes no sense (a
    negative number, ``backoff_max`` below ``backoff``) raises ``AgentDefinitionError`` here.
    ``list_keys(prefix)`` (effects only, optional) lists the keys the downstream system holds
    under a prefix, so the effect audit can find effects the ledger does not know at all.
    ``approval=True`` (or ``Approval(approvers=2, on_reject="fail", expires_after=3600)``,
    effects only): before its intent is written, the run stops for a person to approve the
    exact arguments (``docs/authors/approvals.md``).
    ``rate_limit="60/min"``: at most so many calls per period across every worker; a call
    over it waits for its slot (``ledger.ratelimits``; RUNLEDGER_RATE_LIMITS may override it).
    """
    if kind not in ("pure", "read", "effect"):
        raise AgentDefinitionError(f"tool kind must be pure, read or effect, not {kind!r}")
    policy = RetryPolicy.declared(
        retries=(0 if kind == "effect" else 2) if retries is None else retries,
        backoff=backoff,
        backoff_factor=backoff_factor,
        backoff_max=backoff_max,
        jitter=jitter,
        non_retryable=non_retryable,
    )

    def register(fn: Callable[..., Any]) -> Tool:
        tool_name = name or fn.__name__
        if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
            raise AgentDefinitionError(
                f"tool {tool_name!r} is a generator; a tool returns its result (async def or def)"
            )
        _refuse_async(list_keys, f"tool {tool_name!r}: list_keys (the effect audit calls it)")
        gate = approval_policy(approval, kind=kind, name=tool_name)
        rate = ratelimits.declared(rate_limit, tool=tool_name)
        params = inspect.signature(fn).parameters
        if reserved := sorted(RESERVED_PARAMS & set(params)):
            raise AgentDefinitionError(
                f"tool {tool_name!r}: parameter name {reserved[0]!r} is reserved"
            )
        if kind == "effect":
            require_idempotency_key(tool_name, fn)
        if kind != "effect" and reconcile is not None:
            raise AgentDefinitionError(f"tool {tool_name!r}: only effects have a reconcile")
        if kind != "effect" and "fencing_token" in params:
            raise AgentDefinitionError(f"tool {tool_name!r}: only effects get a fencing_token")
        if kind != "effect" and list_keys is not None:
            raise AgentDefinitionError(f"tool {tool_name!r}: only effects have a list_keys")
        registered = Tool(
            name=tool_name,
            kind=kind,
            fn=fn,
            reconcile=reconcile,
            retries=policy.retries,
            ttl_seconds=ttl_seconds,
            description=(inspect.getdoc(fn) or "").split("\n")[0],
            takes_fencing_token="fencing_token" in params,
            reconcile_takes_fencing_token=reconcile is not None
            and "fencing_token" in inspect.signature(reconcile).parameters,
            list_keys=list_keys,
            retry=policy,
            approval=gate,
            is_async=is_async(fn),
            rate_limit=rate,
        )
        _tools[tool_name] = registered
        return registered

    return register


def agent(
    name: str,
    *,
    plan_version: str = "1",
    divergence: Literal["refuse", "replan"] = "refuse",
    max_resumes: int | None = None,
    tools: tuple[Tool, ...] | list[Tool] = (),
    title: str | Callable[[dict[str, Any]], str] = "",
    labels: tuple[str, ...] | list[str] = (),
    requires: tuple[str, ...] | list[str] = (),
    durability: Durability = "step",
    batch_steps: int | None = None,
    batch_ms: float | None = None,
    concurrency: dict[str, Any] | None = None,
    deadline: float | None = None,
    team: str = "",
) -> Callable[[Callable[..., Any]], Agent]:
    """Register ``fn(ctx, inputs) -> result`` as an agent.

    ``title`` names each run in one line an operator recognises: a format string over the
    inputs (``"Refund {invoice_id}"``) or a function of them. ``labels`` are input keys shown
    and searchable as ``key:value``. ``requires`` are input keys a run cannot start without.

    ``plan_version`` and the hash of ``tools`` are stored on each run; a resume under a
    different one follows ``divergence``: ``refuse`` blocks the run, ``replan`` goes on and keeps
    every effect row. ``max_resumes`` bounds how often a run of it may be resumed.

    ``durability="batched"`` commits the results of read, model and clock steps together
    instead of one commit each: with the next effect's intent, with any other ledger write, at
    the end of the execution, or once ``batch_steps`` steps wait or the oldest has waited
    ``batch_ms`` milliseconds (defaults: RUNLEDGER_BATCH_MAX_STEPS, RUNLEDGER_BATCH_MAX_MS). An
    effect is never sent before every step ahead of it is committed; a crash loses only the
    waiting steps, which the resume executes again (reads must be safe to repeat, and a model
    step re-asked — keep it off for an agent whose model calls are too costly to lose).

    ``concurrency={"key": "inputs.customer", "limit": 1}``: at most ``limit`` runs with the same
    value at that input path execute at once across the fleet (``ledger.pacing``); the others
    stay queued until a slot frees. A start's own ``concurrency_key`` wins.

    ``deadline``: seconds from a run's start after which it stops before its next step, failed
    with reason ``deadline`` (a start's own ``deadline`` wins).

    ``team``: the team its runs belong to (``ledger.teams``): who may see and act on them. A
    start's own ``team`` wins; none at all takes RUNLEDGER_DEFAULT_TEAM.
    """
    if divergence not in ("refuse", "replan"):
        raise AgentDefinitionError(
            f"divergence policy must be refuse or replan, not {divergence!r}"
        )
    if durability not in ("step", "batched"):
        raise AgentDefinitionError(f"durability must be step or batched, not {durability!r}")
    if batch_steps is not None and (not isinstance(batch_steps, int) or batch_steps < 1):
        raise AgentDefinitionError(f"batch_steps must be a positive integer, not {batch_steps!r}")
    if batch_ms is not None and not (isinstance(batch_ms, int | float) and batch_ms >= 0):
        raise AgentDefinitionError(f"batch_ms must be milliseconds >= 0, not {batch_ms!r}")

    paced = pacing.declared(concurrency, agent=name)
    if deadline is not None and (
        isinstance(deadline, bool) or not isinstance(deadline, int | float) or deadline <= 0
    ):
        raise AgentDefinitionError(f"agent {name!r}: deadline is seconds (> 0), not {deadline!r}")
    if callable(title):
        _refuse_async(title, f"agent {name!r}: title (called when a run starts)")
    if team and not is_team(team):
        raise AgentDefinitionError(
            f"agent {name!r}: team {team!r} is not a team: 1 to 63 characters from a-z 0-9 _ - "
            "starting with a letter or a digit"
        )

    def register(fn: Callable[..., Any]) -> Agent:
        if inspect.isasyncgenfunction(fn) or inspect.isgeneratorfunction(fn):
            raise AgentDefinitionError(
                f"agent {name!r} is a generator; an agent returns its result (async def or def)"
            )
        asynchronous = is_async(fn)
        if not asynchronous:
            for t in tools:
                if t.is_async:
                    raise AgentDefinitionError(
                        f"agent {name!r} is a plain def but its tool {t.name!r} is an async def: "
                        "make the agent an async def (and await ctx.call), or the tool a def"
                    )
        registered = Agent(
            name=name,
            fn=fn,
            plan_version=str(plan_version),
            divergence=divergence,
            max_resumes=max_resumes,
            tools=tuple(tools),
            description=(inspect.getdoc(fn) or "").split("\n")[0],
            title=title,
            labels=tuple(labels),
            requires=tuple(requires),
            durability=durability,
            batch_steps=batch_steps,
            batch_ms=batch_ms,
            is_async=asynchronous,
            concurrency=paced,
            deadline=float(deadline) if deadline is not None else None,
            team=team,
        )
        _agents[name] = registered
        return registered

    return register


def get_agent(name: str) -> Agent | None:
    return _agents.get(name)


def agents() -> dict[str, Agent]:
    return dict(_agents)


def get_tool(name: str) -> Tool | None:
    return _tools.get(name)


def tools() -> dict[str, Tool]:
    return dict(_tools)


def unregister_agent(name: str) -> None:
    _agents.pop(name, None)


def record_import_error(module: str, exc: BaseException) -> None:
    _import_errors[module] = f"{type(exc).__name__}: {exc}"


def import_errors() -> dict[str, str]:
    return dict(_import_errors)


def missing_agent_message(name: str) -> str:
    """Why agent ``name`` is not available in this process: the agent modules that failed to
    import (each with its error), or that nothing registered it. One sentence, for people."""
    why = "; ".join(f"{m}: {e}" for m, e in _import_errors.items()) or "it is not registered"
    return f"agent {name!r} is not available here: {why}"
