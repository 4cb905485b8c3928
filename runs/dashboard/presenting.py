"""What the pages show, computed from ledger rows and the dry replay (reads only, no writes).

Every value here ends up in a template that escapes it: JSON is turned into text, never markup.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator

from ledger import registry, selectors
from ledger.conf import conf
from ledger.models import ACTIVE_STATUSES, Run, Step
from ledger.processes.preview import Preview, PreviewStep, preview_resume
from ledger.selectors import evidence, story


def pretty(value: Any) -> str:
    """Canonical JSON (sorted keys), indented for reading."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def pretty_capped(value: Any, limit: int = 20_000) -> str:
    """``pretty``, cut at ``limit`` characters: the raw JSON view has the rest."""
    text = pretty(value)
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n… {len(text) - limit} more characters: see the raw JSON"


@dataclass
class DiffLine:
    kind: str  # "add" | "del" | "hunk" | "same" | "file"
    text: str


def inputs_diff(stored: Any, current: Any) -> list[DiffLine]:
    """A unified diff of stored vs today's inputs, pretty-printed canonical JSON, line by line."""
    lines = difflib.unified_diff(
        pretty(stored).splitlines(),
        pretty(current).splitlines(),
        fromfile="stored inputs",
        tofile="today's inputs",
        lineterm="",
        n=3,
    )
    out = []
    for line in lines:
        if line.startswith(("---", "+++")):
            kind = "file"
        elif line.startswith("@@"):
            kind = "hunk"
        elif line.startswith("+"):
            kind = "add"
        elif line.startswith("-"):
            kind = "del"
        else:
            kind = "same"
        out.append(DiffLine(kind=kind, text=line))
    return out


@dataclass
class CodeCheck:
    """Whether the code registered here today matches what the run recorded."""

    registered: bool
    why_missing: str = ""
    plan_version: str = ""
    tool_schema_hash: str = ""
    plan_differs: bool = False
    schema_differs: bool = False
    code_differs: bool = False

    @property
    def differs(self) -> bool:
        return self.plan_differs or self.schema_differs


def code_check(run: Run) -> CodeCheck:
    definition = registry.get_agent(run.agent)
    if definition is None:
        return CodeCheck(registered=False, why_missing=registry.missing_agent_message(run.agent))
    return CodeCheck(
        registered=True,
        plan_version=definition.plan_version,
        tool_schema_hash=definition.tool_schema_hash,
        # A run no worker executed yet has no stamp: it will take the code a worker runs.
        plan_differs=bool(run.tool_schema_hash) and definition.plan_version != run.plan_version,
        schema_differs=bool(run.tool_schema_hash)
        and definition.tool_schema_hash != run.tool_schema_hash,
        code_differs=bool(run.code_version) and definition.code_version != run.code_version,
    )


@dataclass
class StepView:
    """One row of the step table: the ledger row plus, when compared, today's hash."""

    step: Step
    position: int
    on_chain: bool
    result_head: str | None
    result_truncated: bool
    compared: bool = False
    current_hash: str = ""
    action: str = ""
    after_stale: bool = False
    stale: bool = False
    diff: list[DiffLine] = field(default_factory=list)
    inputs_truncated: bool = False
    #: Its failed attempts (``ledger.selectors.failures``), oldest first.
    failures: list[selectors.AttemptFailure] = field(default_factory=list)
    #: Its stored inputs as text for reading (``with_inputs``): pretty when whole, else the
    #: head as stored; ``inputs_more`` is how many characters the step's page adds.
    inputs_text: str | None = None
    inputs_more: int = 0
    #: The row's links (``with_row_urls``): its whole result, and the settle and stale pages.
    result_url: str = ""
    settle_url: str = ""
    stale_url: str = ""

    @property
    def duration(self) -> float | None:
        s = self.step
        if s.started_at is None or s.finished_at is None:
            return None
        return (s.finished_at - s.started_at).total_seconds()


def step_views(
    steps: list[Step], *, first_position: int, on_chain: int, preview: Preview | None, limit: int
) -> list[StepView]:
    by_id = {p.step_id: p for p in preview.steps} if preview is not None else {}
    out = []
    for i, step in enumerate(steps):
        position = first_position + i
        head: str | None = getattr(step, "result_head", None)
        view = StepView(
            step=step,
            position=position + 1,
            on_chain=position < on_chain,
            result_head=head[:limit] if head is not None else None,
            result_truncated=head is not None and len(head) > limit,
            failures=selectors.attempt_failures(step.step_id, step.errors),
        )
        if preview is not None and preview.available:
            _compare(view, by_id.get(step.step_id))
        out.append(view)
    return out


def with_inputs(views: list[StepView], heads: dict[int, story.InputsHead]) -> list[StepView]:
    """Each view with its step's inputs to read on the run page (every role that sees the
    page sees them, as on the step's own page), capped by ``story.inputs_heads``."""
    for view in views:
        head = heads.get(view.step.pk)
        if head is None:
            continue
        if head.truncated:
            view.inputs_text, view.inputs_more = head.text, head.length - len(head.text)
            continue
        try:
            view.inputs_text = pretty(json.loads(head.text))
        except ValueError:
            view.inputs_text = head.text
    return views


#: A pk no step has, reversed once and replaced per row (``with_row_urls``).
_PK_MARK = 987_654_321_987_654


def with_row_urls(views: list[StepView], run_id: str) -> list[StepView]:
    """Each row's links, from one ``reverse`` a URL name instead of three a row (a hundred
    rows' ``{% url %}`` tags were ~5 ms of the run page). The pk is the last path part that is
    a number, so the run id before it is never touched."""
    patterns = {
        name: reverse(f"runs:{name}", args=[run_id, _PK_MARK]).rsplit(str(_PK_MARK), 1)
        for name in ("step_result", "settle", "stale")
    }
    for view in views:
        pk = str(view.step.pk)
        view.result_url = pk.join(patterns["step_result"])
        view.settle_url = pk.join(patterns["settle"])
        view.stale_url = pk.join(patterns["stale"])
    return views


def _compare(view: StepView, entry: PreviewStep | None) -> None:
    view.compared = True
    if entry is None:
        return
    view.current_hash, view.action, view.after_stale = (
        entry.current_hash,
        entry.action,
        entry.after_stale,
    )
    differs = bool(entry.current_hash) and entry.current_hash != view.step.input_hash
    view.stale = entry.action == "stale" or differs
    if view.stale:
        stored = entry.stored_inputs
        view.inputs_truncated = isinstance(stored, dict) and stored.get("truncated") is True
        view.diff = inputs_diff(stored, entry.current_inputs)


def compute_preview(run: Run) -> Preview:
    """The dry replay of ``run`` (time-bounded by RUNLEDGER_PREVIEW_SECONDS; writes nothing)."""
    return preview_resume(run_id=run.run_id, seconds=conf.RUNLEDGER_PREVIEW_SECONDS)


def preview_context(run: Run, preview: Preview) -> dict[str, Any]:
    """What ``runs/partials/preview.html`` shows (the action pages show it before confirming)."""
    return {
        "run": run,
        "preview": preview,
        "replays": preview.by_action("replay"),
        "rereads": preview.by_action("reread"),
        "stale": preview.by_action("stale"),
        "settle": preview.by_action("settle"),
        # A started effect whose tool has a lookup is settled by the resume itself (it asks);
        # only one without a read path needs a person first.
        "asked": [s for s in preview.by_action("settle") if s.reconcile_available],
        "by_hand": [s for s in preview.by_action("settle") if not s.reconcile_available],
        "execute": preview.by_action("execute"),
        "diverge": preview.by_action("diverge"),
        "downstream": [s for s in preview.steps if s.after_stale],
        "seconds": conf.RUNLEDGER_PREVIEW_SECONDS,
    }


def batched_note(run: Run) -> str:
    """For a running run of an agent with batched durability: how far its recorded steps may
    lag behind what it has executed ("" for every other agent)."""
    agent = registry.get_agent(run.agent)
    if agent is None or agent.durability != "batched":
        return ""
    steps = agent.batch_steps or conf.RUNLEDGER_BATCH_MAX_STEPS
    ms = conf.RUNLEDGER_BATCH_MAX_MS if agent.batch_ms is None else agent.batch_ms
    return (
        f"batched durability: reads, model calls and clock readings commit together, up to "
        f"{steps} steps or {ms:g} ms at a time, and always before an effect is sent"
    )


def tool_has_lookup(tool_name: str) -> bool:
    """The tool is registered here with a read path (reconcile): a resume can ask it again."""
    tool = registry.get_tool(tool_name) if tool_name else None
    return tool is not None and tool.reconcile is not None


# --- the waterfall of steps ---------------------------------------------------------------------

#: Fill of a bar by step kind; failed attempts are drawn in WATERFALL_FAILED. SVG presentation
#: attributes, not CSS: the page's Content-Security-Policy forbids inline styles.
WATERFALL_FILL = {"read": "#3d6fb6", "effect": "#b5651d", "model": "#6f4fb0", "time": "#5b7f5b"}
WATERFALL_FAILED = "#b3261e"
WATERFALL_LABEL_X = 0
WATERFALL_BAR_X = 200
WATERFALL_WIDTH = 960
WATERFALL_ROW = 20


@dataclass
class WaterfallBar:
    x: float
    width: float
    fill: str
    running: bool
    title: str


@dataclass
class WaterfallLine:
    y: float
    text_y: float
    step_id: str
    kind: str
    status: str
    bars: list[WaterfallBar] = field(default_factory=list)


def waterfall(run: Run, now: Any) -> dict[str, Any]:
    """The geometry of the run page's waterfall (``runs/partials/waterfall.html``): one line per
    step in order of first start, one bar per attempt, x proportional to time since the first
    start; an attempt with no end runs to ``now``."""
    rows, more = selectors.step_waterfall(run_id=run.run_id)
    if not rows:
        return {"waterfall": None}
    live = run.status in ACTIVE_STATUSES
    if not live:
        # A stopped run's attempt with no end did not run on until now (its worker died, or
        # it waits for a person): it is drawn to the moment the run stopped, and said so.
        now = run.finished_at or run.status_changed_at or now
    starts = [a.start for r in rows for a in r.attempts]
    ends = [a.end or now for r in rows for a in r.attempts]
    t0, t1 = min(starts), max(max(ends), max(starts))
    span = max((t1 - t0).total_seconds(), 0.001)
    scale = (WATERFALL_WIDTH - WATERFALL_BAR_X - 10) / span
    lines = []
    for i, row in enumerate(rows):
        line = WaterfallLine(
            y=i * WATERFALL_ROW + 4,
            text_y=i * WATERFALL_ROW + 15,
            step_id=row.step_id,
            kind=row.kind,
            status=row.status,
        )
        for attempt in row.attempts:
            end = attempt.end or now
            seconds = max((end - attempt.start).total_seconds(), 0.0)
            offset = (attempt.start - t0).total_seconds()
            how = "failed" if attempt.failed else ("running" if attempt.end is None else "ok")
            if attempt.end is None and not live:
                how = (
                    "no end recorded: outcome unknown"
                    if row.kind == "effect" and row.status == "started"
                    else "no end recorded"
                )
            line.bars.append(
                WaterfallBar(
                    x=round(WATERFALL_BAR_X + offset * scale, 1),
                    width=round(max(seconds * scale, 2.0), 1),
                    fill=WATERFALL_FAILED
                    if attempt.failed
                    else WATERFALL_FILL.get(row.kind, "#666666"),
                    running=attempt.end is None,
                    title=(
                        f"{row.step_id} ({row.kind}) attempt {attempt.number}: starts "
                        f"+{offset:.3f} s, takes {seconds:.3f} s, {how}"
                    ),
                )
            )
        lines.append(line)
    return {
        "waterfall": lines,
        "waterfall_svg": waterfall_svg(lines),
        "waterfall_more": more,
        "waterfall_height": len(lines) * WATERFALL_ROW + 8,
        "waterfall_width": WATERFALL_WIDTH,
        "waterfall_span": span,
        "waterfall_fill": WATERFALL_FILL,
        "waterfall_failed": WATERFALL_FAILED,
    }


def waterfall_svg(lines: list[WaterfallLine]) -> SafeString:
    """The waterfall's lines as SVG markup (one ``<g>`` a step, one ``<rect>`` an attempt), every
    text escaped. Written here rather than as a template loop: a 200-line waterfall took the
    template engine ~15 ms of the run page, this takes ~1 ms."""
    out: list[str] = []
    for line in lines:
        out.append(
            f'<g class="wf-line" data-step="{escape(line.step_id)}">\n'
            f'      <text x="0" y="{line.text_y}" font-size="12" font-family="monospace">'
            f"{escape(Truncator(line.step_id).chars(26))}</text>\n      "
        )
        for bar in line.bars:
            dashed = (
                f' fill-opacity="0.4" stroke="{bar.fill}" stroke-dasharray="3 2"'
                if bar.running
                else ""
            )
            out.append(
                f'<rect x="{bar.x}" y="{line.y}" width="{bar.width}" height="13" '
                f'fill="{bar.fill}"{dashed}><title>{escape(bar.title)}</title></rect>'
            )
        out.append("\n    </g>")
    return mark_safe("".join(out))  # every interpolated text is escaped above


# --- approving with the evidence (issue 23, item 4) -----------------------------------------------


def settlement_contradictions(
    *, result: Any, step: Step, lookup_answer: dict[str, Any]
) -> list[evidence.Contradiction]:
    """Where a settlement's "it happened" result disagrees with the step's inputs or the
    lookup's last answer ([] for no result)."""
    if result is None:
        return []
    sources = evidence.settlement_sources(step=step, lookup_answer=lookup_answer)
    return evidence.contradictions(result, sources)


def result_placeholder(inputs: Any) -> str:
    """The settle form's hint for the result: the checkable fields of *this* step's inputs
    (its amount, its customer), never an amount from somewhere else."""
    shown: dict[str, Any] = {}
    if isinstance(inputs, dict):
        for key, value in inputs.items():
            if evidence.is_checkable(str(key)) and isinstance(value, str | int | float):
                shown[str(key)] = value
            if len(shown) == 4:
                break
    shown["…"] = "what the downstream system recorded"
    return json.dumps(shown, ensure_ascii=False)


@dataclass
class QueueRow:
    """A row of the settlement queue with the proposed result an approver decides on."""

    item: selectors.QueueItem
    result_text: str = ""
    contradictions: list[evidence.Contradiction] = field(default_factory=list)


def queue_rows(items: list[selectors.QueueItem]) -> list[QueueRow]:
    """The queue's rows; a row with an open proposal carries its result (pretty, capped) and
    what in it disagrees with the step's inputs and the lookup's last answer."""
    proposed = [i for i in items if i.proposal is not None and i.proposal.result is not None]
    # Two queries for the page, not two a row: the lookups' last answers, and the inputs the
    # queue's own query leaves out.
    answers = evidence.last_lookup_answers(steps=[i.step for i in proposed])
    inputs = dict(
        Step.objects.filter(pk__in=[i.step.pk for i in proposed]).values_list("pk", "inputs")
    )
    for i in proposed:
        if i.step.pk in inputs:
            i.step.inputs = inputs[i.step.pk]
    rows = []
    for item in items:
        row = QueueRow(item=item)
        proposal = item.proposal
        if proposal is not None and proposal.result is not None:
            row.result_text = pretty_capped(proposal.result, limit=1_500)
            answer = answers.get((item.step.run_id, item.step.step_id), {})
            row.contradictions = settlement_contradictions(
                result=proposal.result, step=item.step, lookup_answer=answer
            )
        rows.append(row)
    return rows
