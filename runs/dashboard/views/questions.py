"""A person answers the question a run waits on (``ctx.ask``) from its run page."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from ledger import selectors, transitions
from runs.dashboard.http import HtmxHttpRequest, run_for
from runs.dashboard.models import VIEW_DASHBOARD
from runs.dashboard.questions import read_answer
from runs.dashboard.roles import role_at_least


@require_POST
@login_required
@permission_required(VIEW_DASHBOARD, raise_exception=True)
def run_answer(request: HtmxHttpRequest, run_id: str) -> HttpResponse:
    """Answer the run's question: a person holding its role (or a stronger one)."""
    run = run_for(request, run_id, perm=VIEW_DASHBOARD)
    question = selectors.question_of(run=run)
    if question is None:
        messages.error(request, "This run waits on no question (answered already?).")
        return redirect("runs:detail", run_id=run.run_id)
    if not role_at_least(request.user, question.role, run.team):  # type: ignore[arg-type]
        raise PermissionDenied(f"this question is for a {question.role}")
    try:
        answer = read_answer(request.POST, question.schema)
        transitions.question_answer(
            run_id=run.run_id,
            answer=answer,
            by=request.user,  # type: ignore[arg-type]
            reason=request.POST.get("reason", "")[:4000],
        )
    except transitions.OperationError as exc:
        messages.error(request, f"Not answered: {exc}")
    else:
        messages.success(request, "Answered: the run is queued to go on with your answer.")
    return redirect("runs:detail", run_id=run.run_id)
