"""Operator actions on stale steps and on whole runs: accept or re-execute, resume, retry,
cancel, fork. Each form page shows what will happen (the dry replay where one applies) and
writes nothing; each POST calls one function of ``ledger.operations``.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from ledger import selectors, transitions
from ledger.models import FINAL_STATUSES, Run, Step, StepKind, StepStatus
from ledger.preview import Preview, stale_entry
from runs import presenting
from runs.acting import refusal, run_or_404, step_or_404
from runs.models import OPERATE_RUNS
from runs.operator_forms import ForkForm, RunActionForm, StaleForm
from runs.tasks import enqueue_resume, enqueue_start
from runs.views import HtmxHttpRequest, compute_preview, preview_context

#: How many downstream steps the re-execute preview lists by name.
DOWNSTREAM_SHOWN = 200

# --- stale steps -----------------------------------------------------------------------------


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
        **preview_context(run, preview),
        "step": step,
        "entry": entry,
        "diff": diff,
        "reset": reset,
        "kept_effects": kept,
        "accept_form": StaleForm(initial={"seen_version": step.version}),
        "reexecute_form": StaleForm(initial={"seen_version": step.version}),
    }


def _render_stale(
    request: HtmxHttpRequest, step: Step, *, status: int = 200, **extra: Any
) -> HttpResponse:
    row = step_or_404(step.run_id, step.pk)  # fresh: after a refusal, the row as it is now
    context = {**_stale_context(row, compute_preview(row.run)), **extra}
    return render(request, "runs/stale.html", context, status=status)


@require_GET
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def stale_page(request: HtmxHttpRequest, run_id: str, pk: int) -> HttpResponse:
    """A stale step: the diff, the resume preview, and the two ways on. Writes nothing."""
    return _render_stale(request, step_or_404(run_id, pk))


@require_POST
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def stale_accept(request: HtmxHttpRequest, run_id: str, pk: int) -> HttpResponse:
    step = step_or_404(run_id, pk)
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
            on_commit=enqueue_resume,
        )
    except transitions.OperationError as exc:
        info = refusal(exc)
        return _render_stale(request, step, status=info.pop("status"), **info)
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
    step = step_or_404(run_id, pk)
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
            on_commit=enqueue_resume,
        )
    except transitions.OperationError as exc:
        info = refusal(exc)
        return _render_stale(request, step, status=info.pop("status"), **info)
    run = selectors.run_detail(run_id=run_id)
    messages.success(
        request,
        f"Re-executing from {step.step_id}: {len(reset)} step{'s' if len(reset) != 1 else ''} "
        f"back to pending, effect rows kept; the run is {run.status}.",
    )
    return redirect("runs:detail", run_id=run_id)


# --- run actions -----------------------------------------------------------------------------

RUN_ACTIONS = ("resume", "retry", "cancel")


def _run_action_context(
    request: HtmxHttpRequest, run: Run, action: str, form: RunActionForm | None
) -> dict[str, Any]:
    context: dict[str, Any] = {
        "run": run,
        "action": action,
        "final": run.status in FINAL_STATUSES,
        "form": form or RunActionForm(initial={"seen_version": run.version}),
        "suggested_budget": max(run.max_resumes, run.resume_count) + 5,
    }
    if action in ("resume", "retry"):
        context |= preview_context(run, compute_preview(run))
    return context


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def run_action(request: HtmxHttpRequest, run_id: str, action: str) -> HttpResponse:
    """GET: what ``action`` (resume, retry, cancel) will do, and its form. POST: do it."""
    run = run_or_404(run_id)
    if request.method == "GET":
        return render(
            request, "runs/run_action.html", _run_action_context(request, run, action, None)
        )
    form = RunActionForm(request.POST)
    if not form.is_valid():
        context = _run_action_context(request, run, action, form)
        return render(request, "runs/run_action.html", context, status=400)
    data = form.cleaned_data
    try:
        done = _apply_run_action(request, run, action, data)
    except transitions.OperationError as exc:
        info = refusal(exc)
        fresh = run_or_404(run_id)
        typed = RunActionForm(
            initial={
                "reason": data["reason"],
                "max_resumes": data["max_resumes"],
                "seen_version": fresh.version,
            }
        )
        context = {**_run_action_context(request, fresh, action, typed), **info}
        return render(request, "runs/run_action.html", context, status=context.pop("status"))
    messages.success(request, f"{action.capitalize()}: run {done.run_id} is now {done.status}.")
    return redirect("runs:detail", run_id=run_id)


def _apply_run_action(request: HtmxHttpRequest, run: Run, action: str, data: dict[str, Any]) -> Run:
    common = {"run_id": run.run_id, "by": request.user, "reason": data["reason"]}
    if action == "cancel":
        return transitions.run_cancel(**common, seen_version=data["seen_version"])
    act = transitions.run_resume if action == "resume" else transitions.run_retry
    return act(
        **common,
        seen_version=data["seen_version"],
        max_resumes=data["max_resumes"],
        on_commit=enqueue_resume,
    )


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def run_fork(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    """GET: fork from the step named by ``?step=``. POST: start the fork and open it."""
    run = run_or_404(run_id)
    if request.method == "GET":
        form = ForkForm(initial={"step_id": request.GET.get("step", run.blocked_step_id)})
        return render(request, "runs/run_fork.html", _fork_context(run, form))
    form = ForkForm(request.POST)
    if not form.is_valid():
        return render(request, "runs/run_fork.html", _fork_context(run, form), status=400)
    try:
        fork = transitions.run_fork(
            run_id=run.run_id,
            step_id=form.cleaned_data["step_id"],
            by=request.user,
            reason=form.cleaned_data["reason"],
            on_commit=enqueue_start,
        )
    except transitions.OperationError as exc:
        info = refusal(exc)
        context = {**_fork_context(run, form), **info}
        return render(request, "runs/run_fork.html", context, status=context.pop("status"))
    messages.success(
        request,
        f"Forked {run.run_id} after {form.cleaned_data['step_id']}: "
        f"this is the new run, {fork.status}.",
    )
    return redirect("runs:detail", run_id=fork.run_id)


def _fork_context(run: Run, form: ForkForm) -> dict[str, Any]:
    chain = selectors.step_chain(run_id=run.run_id)
    step_id = str(form["step_id"].value() or "")
    position = chain.index_of.get(step_id)
    return {
        "run": run,
        "form": form,
        "position": position + 1 if position is not None else None,
        "on_path": position is not None and position < chain.on_chain,
    }
