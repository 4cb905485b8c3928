"""A stale step: the diff of stored vs today's inputs, the resume preview, and the two ways on
— accept the stored result for today's inputs, or re-execute from it. The page writes nothing;
each POST calls one function of ``ledger.transitions``.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from ledger import selectors, transitions
from ledger.models import Run, Step, StepKind, StepStatus
from ledger.processes.preview import Preview, stale_entry
from runs.dashboard import presenting
from runs.dashboard.http import HtmxHttpRequest, render_refused, step_for
from runs.dashboard.models import OPERATE_RUNS
from runs.dashboard.operator_forms import StaleForm

#: How many downstream steps the re-execute preview lists by name.
DOWNSTREAM_SHOWN = 200


def _downstream(run: Run, step: Step) -> tuple[list[Step], list[Step]]:
    """The steps after ``step`` on the recorded path: (reset by a re-execute, kept effects)."""
    chain = selectors.step_chain(run_id=run.run_id)
    start = chain.index_of.get(step.step_id)
    if start is None or start >= chain.on_chain:
        return [], []
    pks = chain.pks[start + 1 : chain.on_chain][:DOWNSTREAM_SHOWN]
    rows = selectors.steps_for_page(run_id=run.run_id, pks=pks)
    reset = [r for r in rows if r.kind != StepKind.EFFECT and r.status != StepStatus.ABANDONED]
    return reset, [r for r in rows if r.kind == StepKind.EFFECT]


def _stale_context(step: Step, preview: Preview) -> dict[str, Any]:
    entry = next((s for s in preview.steps if s.step_id == step.step_id), None)
    diff = []
    if entry is not None and entry.action == "stale":
        diff = presenting.inputs_diff(entry.stored_inputs, entry.current_inputs)
    run = selectors.run_detail(run_id=step.run_id)
    reset, kept = _downstream(run, step)
    return {
        **presenting.preview_context(run, preview),
        "step": step,
        "entry": entry,
        "diff": diff,
        "reset": reset,
        "kept_effects": kept,
        "accept_form": StaleForm(initial={"seen_version": step.version}),
        "reexecute_form": StaleForm(initial={"seen_version": step.version}),
    }


def _page_context(request: HtmxHttpRequest, step: Step) -> dict[str, Any]:
    row = step_for(request, step.run_id, step.pk, perm=OPERATE_RUNS)  # fresh: as it is now
    return _stale_context(row, presenting.compute_preview(row.run))


def _render_stale(
    request: HtmxHttpRequest, step: Step, *, status: int = 200, **extra: Any
) -> HttpResponse:
    context = {**_page_context(request, step), **extra}
    return render(request, "runs/stale.html", context, status=status)


@require_GET
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def stale_page(request: HtmxHttpRequest, run_id: str, pk: int) -> HttpResponse:
    """A stale step: the diff, the resume preview, and the two ways on. Writes nothing."""
    return _render_stale(request, step_for(request, run_id, pk, perm=OPERATE_RUNS))


@require_POST
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def stale_accept(request: HtmxHttpRequest, run_id: str, pk: int) -> HttpResponse:
    step = step_for(request, run_id, pk, perm=OPERATE_RUNS)
    form = StaleForm(request.POST)
    if not form.is_valid():
        return _render_stale(request, step, status=400, accept_errors=form.errors)
    try:
        transitions.step_accept_stale(
            step=step,
            today=stale_entry(step),
            by=request.user,
            reason=form.cleaned_data["reason"],
            seen_version=form.cleaned_data["seen_version"],
        )
    except transitions.OperationError as exc:
        return render_refused(request, "runs/stale.html", _page_context(request, step), exc)
    run = selectors.run_detail(run_id=run_id)
    messages.success(
        request,
        f"Accepted the stored result of {step.step_id} for today's inputs; "
        f"the run is {run.status}.",
    )
    return redirect("runs:detail", run_id=run_id)


@require_POST
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def stale_reexecute(request: HtmxHttpRequest, run_id: str, pk: int) -> HttpResponse:
    step = step_for(request, run_id, pk, perm=OPERATE_RUNS)
    form = StaleForm(request.POST)
    if not form.is_valid():
        return _render_stale(request, step, status=400, reexecute_errors=form.errors)
    try:
        reset = transitions.run_reexecute_from(
            run_id=step.run.run_id,
            step_id=step.step_id,
            by=request.user,
            reason=form.cleaned_data["reason"],
            seen_version=form.cleaned_data["seen_version"],
        )
    except transitions.OperationError as exc:
        return render_refused(request, "runs/stale.html", _page_context(request, step), exc)
    run = selectors.run_detail(run_id=run_id)
    messages.success(
        request,
        f"Re-executing from {step.step_id}: {len(reset)} step{'s' if len(reset) != 1 else ''} "
        f"back to pending, effect rows kept; the run is {run.status}.",
    )
    return redirect("runs:detail", run_id=run_id)
