"""Operator actions on whole runs: resume, retry, cancel, fork, a clean run. Each form page
shows what will happen (the dry replay where one applies) and writes nothing; each POST calls
one function of ``ledger.transitions`` — a resume or retry through ``ledger.processes.resume``,
which runs the dry replay first and hands its verdict to the transition: one that would stop
again at once is refused (``WouldStopAgain``) unless the operator ticks
"resume anyway": no resume is spent silently.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from ledger import selectors, transitions
from ledger.models import FINAL_STATUSES, Run
from ledger.processes import resume as resume_process
from runs.dashboard import presenting
from runs.dashboard.http import HtmxHttpRequest, render_refused, run_for
from runs.dashboard.models import OPERATE_RUNS
from runs.dashboard.operator_forms import CleanRunForm, ForkForm, RunActionForm, resend_phrase

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
        preview = presenting.compute_preview(run)
        context |= presenting.preview_context(run, preview)
        context["blocks_again"] = preview.blocks_again()
    return context


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def run_action(request: HtmxHttpRequest, run_id: str, action: str) -> HttpResponse:
    """GET: what ``action`` (resume, retry, cancel) will do, and its form. POST: do it."""
    run = run_for(request, run_id, perm=OPERATE_RUNS)
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
        if isinstance(exc, transitions.WouldStopAgain):
            exc = transitions.WouldStopAgain(
                run.run_id, f'{exc.why}. Tick "{action} anyway" to spend a resume regardless'
            )
        fresh = run_for(request, run_id, perm=OPERATE_RUNS)
        typed = RunActionForm(
            initial={
                "reason": data["reason"],
                "max_resumes": data["max_resumes"],
                "seen_version": fresh.version,
            }
        )
        context = _run_action_context(request, fresh, action, typed)
        return render_refused(request, "runs/run_action.html", context, exc)
    messages.success(request, f"{action.capitalize()}: run {done.run_id} is now {done.status}.")
    return redirect("runs:detail", run_id=run_id)


def _apply_run_action(request: HtmxHttpRequest, run: Run, action: str, data: dict[str, Any]) -> Run:
    common = {"run_id": run.run_id, "by": request.user, "reason": data["reason"]}
    if action == "cancel":
        return transitions.run_cancel(**common, seen_version=data["seen_version"])
    act = resume_process.run_resume if action == "resume" else resume_process.run_retry
    return act(
        **common,
        seen_version=data["seen_version"],
        max_resumes=data["max_resumes"],
        anyway=data["anyway"],
    )


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def run_fork(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    """GET: fork from the step named by ``?step=``. POST: start the fork and open it."""
    run = run_for(request, run_id, perm=OPERATE_RUNS)
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
            confirm_resend=form.confirmed(),
        )
    except transitions.OperationError as exc:
        return render_refused(request, "runs/run_fork.html", _fork_context(run, form), exc)
    messages.success(
        request,
        f"Forked {run.run_id} after {form.cleaned_data['step_id']}: "
        f"this is the new run, {fork.status}.",
    )
    return redirect("runs:detail", run_id=fork.run_id)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(OPERATE_RUNS, raise_exception=True)
def run_clean(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    """GET: what a clean run replacing this one does. POST: start it and open it."""
    run = run_for(request, run_id, perm=OPERATE_RUNS)
    if request.method == "GET":
        form = CleanRunForm(initial={"seen_version": run.version})
        return render(request, "runs/run_clean.html", _clean_context(run, form))
    form = CleanRunForm(request.POST)
    if not form.is_valid():
        return render(request, "runs/run_clean.html", _clean_context(run, form), status=400)
    try:
        new = transitions.run_start_clean(
            run_id=run.run_id,
            by=request.user,
            reason=form.cleaned_data["reason"],
            seen_version=form.cleaned_data["seen_version"],
            confirm_resend=form.confirmed(),
        )
    except transitions.OperationError as exc:
        fresh = run_for(request, run_id, perm=OPERATE_RUNS)
        return render_refused(request, "runs/run_clean.html", _clean_context(fresh, form), exc)
    messages.success(request, f"Clean run started, replacing {run.run_id}: this is the new run.")
    return redirect("runs:detail", run_id=new.run_id)


def _sent_again_context(sent: list[selectors.SentAgain]) -> dict[str, Any]:
    return {
        "sent_again": sent,
        "resend_count": len(sent),
        "resend_phrase": resend_phrase(len(sent)),
    }


def _clean_context(run: Run, form: CleanRunForm) -> dict[str, Any]:
    return {
        "run": run,
        "form": form,
        "final": run.status in FINAL_STATUSES,
    } | _sent_again_context(selectors.effects_sent_again(run_id=run.run_id))


def _fork_context(run: Run, form: ForkForm) -> dict[str, Any]:
    chain = selectors.step_chain(run_id=run.run_id)
    step_id = str(form["step_id"].value() or "")
    position = chain.index_of.get(step_id)
    on_path = position is not None and position < chain.on_chain
    context = {
        "run": run,
        "form": form,
        "position": position + 1 if position is not None else None,
        "on_path": on_path,
    }
    if on_path:
        kept = selectors.fork_kept(run_id=run.run_id, step_id=step_id)
        context |= _sent_again_context(selectors.effects_sent_again(run_id=run.run_id, kept=kept))
    return context
